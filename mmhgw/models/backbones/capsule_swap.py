"""Putting HGW capsules into the 3x3 convolutions of stock backbones.

The stock classes build their layers as usual; these helpers then replace
chosen 3x3 convolutions by ``HGWCaps`` layers of the same geometry (channels,
stride, padding, dilation), so every stock argument keeps its meaning and no
stock code is copied.
"""
import copy
from typing import Iterable, List, Optional, Sequence

import torch.nn as nn
from mmcv.cnn import build_conv_layer
from mmengine.logging import MMLogger

DEFAULT_HGW_CFG = dict(type='HGWCaps')


def capsule_like(conv: nn.Conv2d, hgw_cfg: Optional[dict]) -> nn.Module:
    """An HGW layer with the geometry of ``conv`` (a k x k ``nn.Conv2d``)."""
    if not isinstance(conv, nn.Conv2d) or conv.groups != 1:
        raise ValueError(f'only plain (groups=1) Conv2d layers can become '
                         f'HGW capsules, got {conv!r}')
    cfg = copy.deepcopy(DEFAULT_HGW_CFG if hgw_cfg is None else hgw_cfg)
    return build_conv_layer(
        cfg, conv.in_channels, conv.out_channels, conv.kernel_size[0],
        stride=conv.stride[0], padding=conv.padding[0],
        dilation=conv.dilation[0], bias=conv.bias is not None)


def check_stage_flags(flags: Sequence[bool], num_stages: int, name: str):
    if len(flags) != num_stages:
        raise ValueError(f'{name} must have one entry per stage '
                         f'({num_stages}), got {tuple(flags)}')


def swap_block_convs(backbone: nn.Module, layer_names: Iterable[str],
                     stage_flags: Sequence[bool],
                     hgw_cfg: Optional[dict]) -> List[str]:
    """Replace ``conv2`` (the 3x3 conv of Bottleneck and BasicBlock) of every
    block in the flagged stages; returns the replaced modules' names."""
    swapped = []
    for stage, (name, flag) in enumerate(zip(layer_names, stage_flags)):
        if not flag:
            continue
        for idx, block in enumerate(getattr(backbone, name)):
            block.conv2 = capsule_like(block.conv2, hgw_cfg)
            swapped.append(f'{name}.{idx}.conv2')
    return swapped


def report_random_capsules(backbone: nn.Module, swapped: List[str]):
    """After loading a plain checkpoint: say which layers stayed random."""
    init_cfg = backbone.init_cfg
    pretrained = isinstance(init_cfg, dict) and \
        init_cfg.get('type') == 'Pretrained'
    if pretrained and swapped:
        MMLogger.get_current_instance().warning(
            f'{type(backbone).__name__}: loaded {init_cfg["checkpoint"]}; '
            f'{len(swapped)} HGW capsule layers have no counterpart in it '
            f'and stay randomly initialised: {", ".join(swapped)}')
