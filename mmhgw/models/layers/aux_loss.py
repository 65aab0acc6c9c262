"""Auxiliary losses that reach the optimiser through an unchanged model."""
import torch
from torch import Tensor


class _AddLossInBackward(torch.autograd.Function):
    """Identity on ``output``; in backward, ``aux`` receives gradient
    ``scale``.

    The effect on every parameter is that of adding ``scale * aux`` to
    whatever scalar loss ``output`` flows into, without that loss knowing
    about it.
    """

    @staticmethod
    def forward(ctx, output, aux, scale):
        ctx.aux_meta = (aux.shape, aux.dtype, aux.device, scale)
        return output.view_as(output)

    @staticmethod
    def backward(ctx, grad_output):
        shape, dtype, device, scale = ctx.aux_meta
        return grad_output, torch.full(shape, scale, dtype=dtype,
                                       device=device), None


def attach_aux_loss(output: Tensor, aux: Tensor, scale: float = 1.0) -> Tensor:
    """Return ``output`` unchanged, with ``aux`` (a scalar) added to the loss.

    Lets a layer deep inside a stock mmdet / mmseg model (whose detector or
    segmentor class knows nothing of it) train on its own regulariser: the
    regulariser's gradient joins the backward pass of the main loss, also
    when the layer runs under gradient checkpointing (``with_cp``).

    The backward pass does not see how the optimiser wrapper transformed the
    main loss before calling ``backward()``: mmengine's ``OptimWrapper``
    divides it by the gradient-accumulation factor (``scale_loss``) and
    ``AmpOptimWrapper`` multiplies it by the current loss scale (2^16 by
    default). ``scale`` is that same factor, so that the injected gradient is
    ``scale * d aux`` and ``aux`` reaches the optimiser with exactly the
    weight of the main loss. In training runs, ``HGWLossScaleHook`` reads the
    factor from the runner's optimiser wrapper before every iteration and
    hands it to the HGW layers, which pass it here; without the hook,
    ``scale`` is 1, right for a plain wrapper without accumulation.

    It takes effect only when ``output`` receives a gradient.
    """
    if aux.dim() != 0:
        raise ValueError(f'aux must be a scalar, got shape {tuple(aux.shape)}')
    if not (torch.is_grad_enabled() and aux.requires_grad):
        return output
    return _AddLossInBackward.apply(output, aux, float(scale))
