"""Distributed runs on machines without CUDA."""
import gc

import torch
import torch.distributed as dist

from mmhgw.config_utils import sync_bn_to_bn


def prepare_cpu_distributed(cfg) -> bool:
    """Make ``cfg`` train or test data-parallel on CPUs; True if it did.

    Applies when the config is launched distributed (``cfg.launcher`` other
    than ``'none'``) and CUDA is unavailable. mmengine 0.10's ``init_dist``
    calls ``torch.cuda.set_device``, which a CPU build of torch lacks, so
    the gloo process group is created here (from torchrun's environment)
    and the Runner, finding it, skips its own. SyncBN needs CUDA and
    becomes BN; DDP then broadcasts rank 0's BN buffers every step so the
    replicas stay identical, and gets no ``device_ids`` (CPU modules).
    """
    if cfg.get('launcher', 'none') == 'none' or torch.cuda.is_available():
        return False
    cfg.setdefault('env_cfg', {}).setdefault('dist_cfg', {})
    cfg.env_cfg.dist_cfg['backend'] = 'gloo'
    sync_bn_to_bn(cfg.model)
    if cfg.get('model_wrapper_cfg') is None:
        cfg.model_wrapper_cfg = dict(
            type='MMDistributedDataParallel', device_ids=None,
            broadcast_buffers=True,
            find_unused_parameters=cfg.get('find_unused_parameters', False))
    if not dist.is_initialized():
        dist.init_process_group(backend='gloo')
    return True


def finish_distributed():
    """Tear the process group down after a successful run.

    A gloo group left to interpreter exit is destroyed while Python is being
    finalised, and its worker threads can abort a rank that succeeded
    ("terminate called without an active exception"). The group is freed
    only when nothing refers to it any more: the caller drops its Runner
    (whose DDP wrapper and reducer hold the group) before calling this, and
    the collection below breaks the Runner's reference cycles. Called only
    on success: after an exception on one rank the others may be inside a
    collective, and the teardown could hang.
    """
    if dist.is_available() and dist.is_initialized():
        dist.barrier()
        gc.collect()
        dist.destroy_process_group()
        gc.collect()
