"""Capsule pooling (paper Sec. Q2): replaces global mean pooling."""
import torch
import torch.nn as nn
from torch import Tensor

from mmhgw.registry import MODELS


@MODELS.register_module()
class CapsulePool(nn.Module):
    """Global pooling that averages the capsules of each type.

    Input channels are type-major capsules ``[B, types * dim, H, W]``; every
    location holds one capsule of each type. A type's pooled capsule is the
    mean of its capsules over locations, weighted by their activation (the
    capsule length) when ``weighted``, so that absent capsules (length ~0)
    do not dilute the present ones. With ``weighted=False`` this equals mean
    pooling. Output ``[B, types * dim, 1, 1]``, as ``AdaptiveAvgPool2d(1)``.

    Args:
        num_types: capsule types; the channel count must be divisible by it.
        weighted: weight capsules by their length.
        eps: keeps the weighted mean finite when every capsule has length 0.
    """

    def __init__(self, num_types: int, weighted: bool = True,
                 eps: float = 1e-6):
        super().__init__()
        if num_types < 1:
            raise ValueError(f'num_types must be >= 1, got {num_types}')
        self.num_types, self.weighted, self.eps = num_types, weighted, eps

    def forward(self, x: Tensor) -> Tensor:
        B, C, H, W = x.shape
        if C % self.num_types:
            raise ValueError(f'input channels {C} must be divisible by '
                             f'num_types={self.num_types}')
        caps = x.reshape(B, self.num_types, C // self.num_types, H * W)
        if not self.weighted:
            return caps.mean(-1).reshape(B, C, 1, 1)
        length = torch.sqrt(caps.pow(2).sum(2, keepdim=True) + self.eps**2)
        pooled = (caps * length).sum(-1) / length.sum(-1)
        return pooled.reshape(B, C, 1, 1)
