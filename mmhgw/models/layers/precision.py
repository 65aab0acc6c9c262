"""Keeping a layer's own tensors and arithmetic in float32 (or wider) in a
16-bit model, as mmcv's fp16 utilities keep norm layers in float32."""
import itertools
from contextlib import nullcontext

import torch
from torch import nn


def narrower_than_float32(dtype: torch.dtype) -> bool:
    """Whether ``dtype`` is a floating type of fewer than 32 bits."""
    return dtype.is_floating_point and torch.finfo(dtype).bits < 32


def autocast_off(device_type: str):
    """A context without autocast on ``device_type`` (which would run the
    enclosed products in 16 bits)."""
    try:
        enabled = torch.is_autocast_enabled(device_type)
    except RuntimeError:  # a device type autocast does not know ('meta')
        return nullcontext()
    return torch.autocast(device_type, enabled=False) if enabled \
        else nullcontext()


def restore_float32(module: nn.Module, recurse: bool = True) -> nn.Module:
    """Cast back to float32 every parameter, buffer and gradient of
    ``module`` that a ``.half()``, ``.bfloat16()`` or ``.to(dtype)`` made
    narrower; wider and non-float tensors are left as they are."""
    for t in itertools.chain(module.parameters(recurse=recurse),
                             module.buffers(recurse=recurse)):
        if narrower_than_float32(t.dtype):
            t.data = t.data.float()
            if t.grad is not None:
                t.grad = t.grad.float()
    return module
