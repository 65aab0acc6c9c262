"""The beta schedule of Algorithm 1 and the HGW terms in the training log."""
from typing import Optional

import torch
from mmengine.hooks import Hook
from mmengine.model import is_model_wrapper

from mmhgw.arg_checks import check_int, check_unit
from mmhgw.registry import HOOKS


def hgw_modules(model):
    """Every HGW capsule layer in ``model`` (wrappers unwrapped)."""
    from mmhgw.models.layers import HGWCaps
    if is_model_wrapper(model):
        model = model.module
    return [m for m in model.modules() if isinstance(m, HGWCaps)]


@HOOKS.register_module()
class HGWBetaWarmupHook(Hook):
    """Ramps beta of every HGW layer from 0 to its final value, and logs.

    The paper grows beta as ``beta_u = u / U`` because the embeddings are
    random early on and their distances unreliable (Sec. 5). Here ``u`` is
    the training iteration: before iteration ``u`` each layer gets
    ``beta = final * min(1, u / warmup_iters)``, where ``final`` is the
    layer's own ``beta_final`` unless ``final_beta`` overrides it. Under
    ablation C (``use_observed=False``) beta is only the Wasserstein weight
    (the structures use the embeddings alone) and ramps as in the other
    variants. Being a function
    of the iteration, the schedule resumes exactly.

    After each iteration the regulariser E summed over the layers, the
    alignment term likewise (layers with ``align_weight > 0``), the mean HGW
    distance and the mean beta go to the MessageHub as ``train/hgw_reg``,
    ``train/hgw_align``, ``train/hgw_dist`` and ``train/hgw_beta``, so the
    LoggerHook prints them.

    Args:
        warmup_iters: iterations to reach the final beta (U).
        final_beta: overrides every layer's final beta if given.
        log_stats: write the HGW terms to the MessageHub.
    """
    priority = 'NORMAL'

    def __init__(self, warmup_iters: int = 1000,
                 final_beta: Optional[float] = None, log_stats: bool = True):
        check_int('warmup_iters', warmup_iters, minimum=0)
        if final_beta is not None:
            check_unit('final_beta', final_beta)
        self.warmup_iters = warmup_iters
        self.final_beta = final_beta
        self.log_stats = log_stats

    def beta_at(self, final: float, it: int) -> float:
        if self.warmup_iters == 0:
            return final
        return final * min(1.0, it / self.warmup_iters)

    def before_train_iter(self, runner, batch_idx, data_batch=None):
        for m in hgw_modules(runner.model):
            final = m.beta_final if self.final_beta is None \
                else self.final_beta
            m.beta.fill_(self.beta_at(final, runner.iter))

    def after_train_iter(self, runner, batch_idx, data_batch=None,
                         outputs=None):
        if not self.log_stats:
            return
        modules = hgw_modules(runner.model)
        stats = [m.last_stats for m in modules if m.last_stats is not None]
        if not stats:
            return
        hub = runner.message_hub
        regs, dists, aligns = zip(*stats)
        for key, terms in (('train/hgw_reg', regs), ('train/hgw_align',
                                                     aligns)):
            terms = [t for t in terms if t is not None]
            if terms:
                hub.update_scalar(key, torch.stack(terms).sum().item())
        hub.update_scalar('train/hgw_dist', torch.stack(dists).mean().item())
        hub.update_scalar('train/hgw_beta',
                          sum(m.beta.item() for m in modules) / len(modules))
