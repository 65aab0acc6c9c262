"""Train a detector or segmentor from a config with mmengine's Runner.

Works for mmdet and mmseg configs alike: the Runner reads ``default_scope``.

    python tools/train.py CONFIG [--work-dir DIR] [--resume [CKPT]]
        [--start-fresh] [--amp]

One run at a time per work dir (a second one refuses to start); ``--resume``
without a path continues from the work dir's ``last_checkpoint`` or refuses
to start, naming what it looked for (see ``mmhgw/engine/work_dir.py``).
Ctrl-C or SIGTERM stops a run after the iteration in progress, with a
checkpoint of it to resume from (``InterruptCheckpointHook``).
"""
import argparse

from mmengine.runner import Runner

import mmhgw  # noqa: F401  (registers mmhgw; safe checkpoint loading)
from mmhgw.config_check import check_registry_types
from mmhgw.config_utils import add_runner_args, config_from_args
from mmhgw.engine.cpu_dist import finish_distributed, prepare_cpu_distributed
from mmhgw.engine.hooks import CheckpointFitHook, InterruptCheckpointHook
from mmhgw.engine.preflight import check_weight_sources
from mmhgw.engine.work_dir import claim_work_dir


def parse_args():
    parser = argparse.ArgumentParser(description='Train a model')
    parser.add_argument('config', help='train config file path')
    parser.add_argument(
        '--resume', nargs='?', type=str, const='auto',
        help='resume from this checkpoint; without a path, from the latest '
        'checkpoint in the work dir (refusing to start if there is none)')
    parser.add_argument(
        '--start-fresh', action='store_true',
        help='with --resume: train from scratch when the work dir has no '
        'checkpoint to resume')
    parser.add_argument('--amp', action='store_true',
                        help='automatic mixed precision training')
    add_runner_args(parser)
    args = parser.parse_args()
    if args.start_fresh and args.resume is None:
        parser.error('--start-fresh applies to --resume only')
    if args.amp and not amp_device_available():
        parser.error("--amp trains through mmengine's AmpOptimWrapper, "
                     'which needs a GPU (CUDA) or an NPU, MLU or MUSA '
                     'device; this machine has none')
    return args


def amp_device_available() -> bool:
    """Whether mmengine's ``AmpOptimWrapper`` can run here (the devices
    its constructor accepts)."""
    from mmengine.device import (is_cuda_available, is_mlu_available,
                                 is_musa_available, is_npu_available)
    return (is_cuda_available() or is_npu_available() or is_mlu_available()
            or is_musa_available())


def main():
    args = parse_args()
    cfg = config_from_args(args)
    check_weight_sources(cfg)
    check_registry_types(cfg, args.config)
    claim_work_dir(cfg, args.resume, args.start_fresh)  # held until exit
    prepare_cpu_distributed(cfg)
    if args.amp:
        cfg.optim_wrapper.type = 'AmpOptimWrapper'
        cfg.optim_wrapper.setdefault('loss_scale', 'dynamic')
    runner = Runner.from_cfg(cfg)
    if cfg.get('resume'):
        runner.register_hook(CheckpointFitHook(cfg.load_from, 'resume'))
    if not any(isinstance(h, InterruptCheckpointHook) for h in runner.hooks):
        runner.register_hook(InterruptCheckpointHook())
    runner.train()
    del runner  # its DDP wrapper holds the process group
    finish_distributed()


if __name__ == '__main__':
    main()
