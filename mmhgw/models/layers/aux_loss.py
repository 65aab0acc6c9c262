"""Auxiliary losses that reach the optimiser through an unchanged model."""
import torch
from torch import Tensor


class _AddLossInBackward(torch.autograd.Function):
    """Identity on ``output``; in backward, ``aux`` receives gradient 1.

    The effect on every parameter is that of adding ``aux`` to whatever
    scalar loss ``output`` flows into, without that loss knowing about it.
    """

    @staticmethod
    def forward(ctx, output, aux):
        ctx.aux_meta = (aux.shape, aux.dtype, aux.device)
        return output.view_as(output)

    @staticmethod
    def backward(ctx, grad_output):
        shape, dtype, device = ctx.aux_meta
        return grad_output, torch.ones(shape, dtype=dtype, device=device)


def attach_aux_loss(output: Tensor, aux: Tensor) -> Tensor:
    """Return ``output`` unchanged, with ``aux`` (a scalar) added to the loss.

    Lets a layer deep inside a stock mmdet / mmseg model (whose detector or
    segmentor class knows nothing of it) train on its own regulariser: the
    regulariser's gradient joins the backward pass of the main loss.

    Caveats, by construction: ``aux`` is added with weight 1 to the gradient
    of the main loss as it arrives, so AMP loss scaling and gradient
    accumulation's division do not apply to it; and it takes effect only
    when ``output`` receives a gradient.
    """
    if aux.dim() != 0:
        raise ValueError(f'aux must be a scalar, got shape {tuple(aux.shape)}')
    if not (torch.is_grad_enabled() and aux.requires_grad):
        return output
    return _AddLossInBackward.apply(output, aux)
