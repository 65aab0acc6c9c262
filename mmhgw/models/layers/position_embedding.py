"""Components of the positions of a k x k patch, one shared embedding for
every position (``HGWCaps(components='positions')``)."""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor
from torch.nn.modules.utils import _pair


class PositionEmbedding(nn.Conv2d):
    """``X_p[l, i] = W x(l + offset_i)``: the input vector at each of the
    ``k_h k_w`` positions ``i`` of the patch of output location ``l``,
    mapped by one linear map ``W`` [part_dim, in_channels] shared by all
    positions, so a component says what is at a position, not which
    position (or which input type) it is.

    It is a convolution of the patch geometry (``kernel_size``, ``stride``,
    ``padding``, ``dilation``, ``padding_mode`` as ``nn.Conv2d``, readable
    as a convolution's attributes), run as ``W`` (1 x 1, no bias) followed
    by a fixed grouped convolution whose one-hot kernels copy each position
    of the embedded map: padding the embedded map equals embedding the
    padded input, since ``W`` is linear without bias, for every padding
    mode. ``weight`` is ``W`` as a [part_dim, in_channels, 1, 1] kernel,
    drawn as ``nn.Conv2d`` draws a 1 x 1 kernel. The copy is a convolution
    rather than an unfold, which would gather without multiplying, because
    a convolution keeps zero padding inside the op: the layer then exports
    to ONNX at opset 17, where an unfold's padding becomes a ``Pad`` node
    that the ONNX version converter cannot take below opset 18; its
    ``part_dim (k_h k_w)^2`` multiply-adds per location are a small part
    of the layer's (:mod:`mmhgw.analysis.flops` counts them).

    The output [B, part_dim * k_h k_w, H', W'] is part-major: channel
    ``c * k_h k_w + i`` is part ``c`` of position ``i`` (row-major in the
    kernel window).
    """

    def __init__(self, in_channels: int, part_dim: int, kernel_size, stride=1,
                 padding=0, dilation=1, padding_mode: str = 'zeros'):
        kh, kw = _pair(kernel_size)
        super().__init__(part_dim, part_dim * kh * kw, (kh, kw), stride=stride,
                         padding=padding, dilation=dilation, groups=part_dim,
                         bias=False, padding_mode=padding_mode)
        self.num_positions = kh * kw
        self.embed_channels = in_channels
        del self.weight
        self.weight = nn.Parameter(torch.empty(part_dim, in_channels, 1, 1))
        # Not in the state dict: it is fixed by the geometry.
        select = torch.eye(kh * kw).view(kh * kw, 1, kh, kw)
        self.register_buffer('select', select.repeat(part_dim, 1, 1, 1),
                             persistent=False)
        self.reset_parameters()

    def reset_parameters(self):
        # nn.Conv2d's constructor calls this before the embedding exists:
        # nothing to draw for the copy's kernel, which is not a parameter.
        if hasattr(self, 'select'):
            nn.init.kaiming_uniform_(self.weight, a=math.sqrt(5))

    def extra_repr(self) -> str:
        return (f'{self.embed_channels}, {self.weight.shape[0]} per position, '
                f'positions={self.num_positions}, '
                f'kernel_size={self.kernel_size}, stride={self.stride}, '
                f'padding={self.padding}, dilation={self.dilation}, '
                f'padding_mode={self.padding_mode}')

    def forward(self, x: Tensor) -> Tensor:
        embedded = F.conv2d(x, self.weight)
        return self._conv_forward(embedded, self.select, None)
