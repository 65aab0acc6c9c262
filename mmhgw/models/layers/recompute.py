"""Saved-tensor hooks that keep a recipe in place of one large tensor."""
import contextlib
from typing import Callable

import torch
from torch import Tensor


class _Recipe:
    """What autograd keeps in place of the tensor that
    :func:`recomputed_in_backward` names (no reference to that tensor)."""


def _identity(t: Tensor) -> tuple:
    return (t.data_ptr(), tuple(t.shape), t.stride(), t.dtype, t.device)


def recomputed_in_backward(target: Tensor, recompute: Callable[[], Tensor]):
    """A context under which autograd keeps no copy of ``target``: a tensor
    saved for backward that is ``target`` (same storage, shape, strides,
    dtype and device) is formed again by ``recompute()``, without a
    gradient, when backward reads it. Every other saved tensor goes to the
    hooks in force outside, if any, so that torch.utils.checkpoint and
    measurements of what autograd keeps see them as before.

    ``recompute`` must give ``target`` again, bit for bit, from tensors that
    autograd keeps anyway (their in-place modification is then caught by
    autograd's version check on those tensors). Where this torch cannot
    name the hooks in force, and under graph capture (torch.compile,
    torch.export, jit traces: tensors without storage to name, graphs that
    record what they run), nothing is recomputed.
    """
    if (type(target) is not torch.Tensor or torch.compiler.is_compiling()
            or torch.jit.is_tracing()):
        return contextlib.nullcontext()
    # The hooks in force (torch.utils.checkpoint's, a measurement's): only
    # the innermost pair of saved-tensor hooks applies, so these pass on to
    # them whatever they do not recompute.
    top = getattr(torch._C._autograd, '_top_saved_tensors_default_hooks', None)
    if top is None:
        return contextlib.nullcontext()
    outer = top(False)
    pack_outer, unpack_outer = outer if outer is not None else (None, None)
    key = _identity(target)

    def pack(t: Tensor):
        if type(t) is torch.Tensor and _identity(t) == key:
            return _Recipe()
        return pack_outer(t) if pack_outer is not None else t

    def unpack(x):
        if isinstance(x, _Recipe):
            with torch.no_grad():
                return recompute()
        return unpack_outer(x) if unpack_outer is not None else x

    return torch.autograd.graph.saved_tensors_hooks(pack, unpack)
