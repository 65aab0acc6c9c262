"""The regulariser E with the weight of the task loss under any wrapper."""
import torch
from mmengine.hooks import Hook
from mmengine.logging import print_log
from mmengine.optim import OptimWrapper, OptimWrapperDict

from mmhgw.registry import HOOKS
from .beta_warmup import hgw_modules


def loss_factor(optim_wrapper: OptimWrapper) -> float:
    """The factor by which ``optim_wrapper`` multiplies the loss of the
    coming iteration before ``backward()``.

    mmengine 0.10.7: ``update_params`` calls ``scale_loss`` (division by the
    accumulation count, or by the remainder in the last updates of a run),
    then ``backward``, which under ``AmpOptimWrapper`` multiplies by
    ``loss_scaler.get_scale()``. Both are read here as the wrapper would
    apply them next, before ``_inner_count`` moves on; the loss scale only
    changes in ``step()``, after the backward pass.
    """
    factor = float(optim_wrapper.scale_loss(torch.ones(())))
    scaler = getattr(optim_wrapper, 'loss_scaler', None)
    if scaler is not None:
        factor *= float(scaler.get_scale())
    return factor


@HOOKS.register_module()
class HGWLossScaleHook(Hook):
    """Gives every HGW layer the factor the optimiser wrapper applies to the
    loss, so that the regulariser E (Eq. reg) joins the task loss with the
    same weight under AMP loss scaling and gradient accumulation.

    E's gradient is injected in the backward pass
    (:func:`~mmhgw.models.layers.attach_aux_loss`), after the wrapper has
    scaled the task loss; before each training iteration this hook sets
    ``loss_scale`` of every ``HGWCaps`` module to :func:`loss_factor` of
    ``runner.optim_wrapper``, which the layer applies to E's gradient. The
    result equals a backward pass of ``scale_loss(loss + E)`` through the
    wrapper (tested for ``AmpOptimWrapper``-style scaling and for
    ``accumulative_counts``).

    Wrappers that scale the loss elsewhere (``OptimWrapperDict``, apex,
    DeepSpeed) are not read; the layers keep a factor of 1 and a warning
    says so.
    """
    priority = 'NORMAL'

    def __init__(self):
        self._warned = False

    def before_train_iter(self, runner, batch_idx, data_batch=None):
        optim_wrapper = runner.optim_wrapper
        # A wrapper with its own backward() and no loss_scaler (apex) scales
        # the loss where this hook cannot see it.
        unknown = (type(optim_wrapper).backward is not OptimWrapper.backward
                   and not hasattr(optim_wrapper, 'loss_scaler'))
        if isinstance(optim_wrapper, OptimWrapperDict) or unknown:
            if not self._warned:
                print_log(
                    f'HGWLossScaleHook: cannot read the loss scaling '
                    f'of {type(optim_wrapper).__name__}; the HGW '
                    f'regulariser enters the gradient with weight 1',
                    logger='current', level='WARNING')
                self._warned = True
            factor = 1.0
        else:
            factor = loss_factor(optim_wrapper)
        for m in hgw_modules(runner.model):
            m.loss_scale = factor
