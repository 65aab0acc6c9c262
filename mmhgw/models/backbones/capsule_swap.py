"""Putting HGW capsules into the 3x3 convolutions of stock backbones.

The stock classes build their layers as usual; these helpers then replace
chosen 3x3 convolutions by ``HGWCaps`` layers of the same geometry (channels,
stride, padding, dilation), so every stock argument keeps its meaning and no
stock code is copied. :class:`CapsuleSwapMixin` gives a capsule backbone the
weight initialisation and ``train()`` that go with the swap.

The norm layer that follows a replaced convolution is replaced too, by a
fresh one of the same type, under the name ``hgw_<stock name>`` (e.g.
``layer3.0.hgw_bn2``): it normalises the capsule output, whose statistics
have nothing in common with the convolution's, so neither a plain
checkpoint (``init_cfg`` Pretrained, ``load_from``) may fill it, nor may
``norm_eval=True`` freeze it at its initial statistics
(:func:`train_capsule_norms`).
"""
import copy
import re
from typing import (Any, Dict, Iterable, List, Mapping, Optional, Sequence,
                    Tuple)

import torch.nn as nn
from mmcv.cnn import build_conv_layer
from mmengine.logging import MMLogger
from mmengine.runner import CheckpointLoader

DEFAULT_HGW_CFG = dict(type='HGWCaps')

#: Name prefix of the norm layers that follow capsule layers.
CAPSULE_NORM_PREFIX = 'hgw_'


def capsule_like(conv: nn.Conv2d, hgw_cfg: Optional[dict]) -> nn.Module:
    """An HGW layer with the geometry of ``conv`` (an ``nn.Conv2d``): its
    kernel size, stride, padding and dilation as the convolution holds them
    (non-square ones too) and its padding mode."""
    if not isinstance(conv, nn.Conv2d) or conv.groups != 1:
        raise ValueError(f'only plain (groups=1) Conv2d layers can become '
                         f'HGW capsules, got {conv!r}')
    cfg = copy.deepcopy(DEFAULT_HGW_CFG if hgw_cfg is None else hgw_cfg)
    try:
        return build_conv_layer(cfg, conv.in_channels, conv.out_channels,
                                conv.kernel_size, stride=conv.stride,
                                padding=conv.padding, dilation=conv.dilation,
                                bias=conv.bias is not None,
                                padding_mode=conv.padding_mode)
    except ValueError as err:
        # Name the convolution: a stage flag or a channel count that does
        # not suit one layer shows in the layer's own arguments only.
        raise ValueError(f'capsules in place of {conv!r}: {err}') from None


def fresh_norm(norm: nn.Module) -> nn.Module:
    """A newly initialised norm layer of the type and arguments of ``norm``
    (BN: running mean 0, variance 1; weight 1, bias 0), trainable: it has
    no pretrained values to keep, whatever ``requires_grad`` the stock
    ``norm_cfg`` gives."""
    new = copy.deepcopy(norm)
    if hasattr(new, 'reset_parameters'):
        new.reset_parameters()
    for param in new.parameters():
        param.requires_grad_(True)
    return new


def renew_norm(owner: nn.Module, name_attr: str) -> Optional[str]:
    """Replace the norm ``owner`` names in its attribute ``name_attr`` (as
    ``norm2_name`` of ResNet blocks, ``norm_name`` of ``ConvModule``) by
    :func:`fresh_norm` under ``hgw_<name>``; the stock ``norm2`` / ``norm``
    properties follow the name. Returns the new name (None if no norm)."""
    old = getattr(owner, name_attr)
    if old is None:
        return None
    norm = getattr(owner, old)
    delattr(owner, old)
    new = CAPSULE_NORM_PREFIX + old
    owner.add_module(new, fresh_norm(norm))
    setattr(owner, name_attr, new)
    return new


def swap_conv_module(conv_module: nn.Module, hgw_cfg: Optional[dict]):
    """Capsules in place of the convolution of an mmcv ``ConvModule``, and a
    fresh norm after it (if its norm comes after the convolution)."""
    conv_module.conv = capsule_like(conv_module.conv, hgw_cfg)
    order = conv_module.order
    if order.index('norm') > order.index('conv'):
        renew_norm(conv_module, 'norm_name')


def capsule_norms(backbone: nn.Module) -> List[Tuple[str, nn.Module]]:
    """``(name, module)`` of the norm layers that follow capsule layers."""
    return [(name, m) for name, m in backbone.named_modules()
            if name.rsplit('.', 1)[-1].startswith(CAPSULE_NORM_PREFIX)]


def train_capsule_norms(backbone: nn.Module, frozen=lambda name: False):
    """After the stock ``train()``: the norms that follow capsule layers
    train (batch statistics, running statistics updated) also under
    ``norm_eval=True``, except those for which ``frozen(name)``."""
    for name, norm in capsule_norms(backbone):
        if not frozen(name):
            norm.train()


def check_stage_flags(flags: Sequence[bool], num_stages: int, name: str):
    if len(flags) != num_stages:
        raise ValueError(f'{name} must have one entry per stage '
                         f'({num_stages}), got {tuple(flags)}')


def swap_block_convs(backbone: nn.Module, layer_names: Iterable[str],
                     stage_flags: Sequence[bool],
                     hgw_cfg: Optional[dict]) -> List[str]:
    """Replace ``conv2`` (the 3x3 conv of Bottleneck and BasicBlock) of every
    block in the flagged stages, and the norm after it (``norm2``, by
    :func:`renew_norm`); returns the replaced convolutions' names."""
    swapped = []
    for stage, (name, flag) in enumerate(zip(layer_names, stage_flags)):
        if not flag:
            continue
        for idx, block in enumerate(getattr(backbone, name)):
            block.conv2 = capsule_like(block.conv2, hgw_cfg)
            renew_norm(block, 'norm2_name')
            swapped.append(f'{name}.{idx}.conv2')
    return swapped


def pretrained_keys(init_cfg: dict) -> Optional[Dict[str, Any]]:
    """The keys that ``init_cfg=dict(type='Pretrained', ...)`` offers to the
    module it initialises, each with its value's shape (None for a value
    without one); None if the checkpoint cannot be read.

    The keys are those mmengine's ``PretrainedInit`` passes on: the
    checkpoint's ``state_dict`` entry if it has one (else the whole
    checkpoint); with a ``prefix``, only the keys that start with it (a dot
    appended if missing), stripped of it; without one, every key, with
    DistributedDataParallel's ``module.`` stripped as ``load_checkpoint``
    does.
    """
    try:
        # logger='silent': the initialiser has logged this load already.
        checkpoint = CheckpointLoader.load_checkpoint(init_cfg['checkpoint'],
                                                      map_location='cpu',
                                                      logger='silent')
    except Exception:  # noqa: BLE001  (any failure: keys unknown)
        return None
    if not isinstance(checkpoint, Mapping):
        return None
    state = checkpoint.get('state_dict', checkpoint)
    if not isinstance(state, Mapping):
        return None
    prefix = init_cfg.get('prefix')
    if prefix is None:
        keys = {re.sub(r'^module\.', '', k): v for k, v in state.items()}
    else:
        if not prefix.endswith('.'):
            prefix += '.'
        keys = {
            k[len(prefix):]: v
            for k, v in state.items() if k.startswith(prefix)
        }
    return {k: getattr(v, 'shape', None) for k, v in keys.items()}


def unfilled(backbone: nn.Module, names: Sequence[str],
             offered: Dict[str, Any]) -> List[str]:
    """Those of the submodules ``names`` of ``backbone`` that a checkpoint
    offering ``offered`` (key: shape, as :func:`pretrained_keys`) leaves
    freshly initialised: one of their parameters or buffers is missing from
    it, or has another shape (mmengine skips such a key)."""
    own = backbone.state_dict()
    out = []
    for name in names:
        for key, value in own.items():
            if key.startswith(name + '.') and (key not in offered
                                               or offered[key] != value.shape):
                out.append(name)
                break
    return out


def report_random_capsules(backbone: nn.Module, swapped: List[str]):
    """After ``init_cfg`` Pretrained loaded a checkpoint: name the capsule
    layers (``swapped``) and the norms after them that it did not fill, in
    a warning; none if it filled them all (a checkpoint of an HGWCaps
    backbone, e.g. from ``capsules_from_stock.py`` or a pretraining run).
    If the checkpoint cannot be read here, all of them are named."""
    init_cfg = backbone.init_cfg
    pretrained = isinstance(init_cfg, dict) and \
        init_cfg.get('type') == 'Pretrained'
    if not (pretrained and swapped):
        return
    names = list(swapped) + [name for name, _ in capsule_norms(backbone)]
    offered = pretrained_keys(init_cfg)
    missing = names if offered is None else \
        unfilled(backbone, names, offered)
    if missing:
        MMLogger.get_current_instance().warning(
            f'{type(backbone).__name__}: loaded {init_cfg["checkpoint"]}; '
            f'{len(missing)} of the {len(names)} HGW capsule layers and '
            f'norms after them have no counterpart in it and stay '
            f'freshly initialised: {", ".join(missing)}')


class CapsuleSwapMixin:
    """What a stock backbone needs once capsules replaced some of its
    convolutions: listed before the stock class among the bases, e.g.
    ``class HGWCapsResNet(CapsuleSwapMixin, ResNet)``.

    The subclass's ``__init__`` calls the stock one, then swaps: a ResNet by
    :meth:`swap_resnet_stages`, another backbone by :func:`swap_conv_module`
    and the like, setting ``hgw_layers`` itself. The mixin then extends

    - ``init_weights()``: after the stock initialisation (an ``init_cfg``
      Pretrained checkpoint included), a warning names the capsule layers
      and norms the checkpoint left freshly initialised
      (:func:`report_random_capsules`);
    - ``train(mode)``: after the stock ``train()``, the norms after capsule
      layers train also under ``norm_eval=True``, except in frozen stages
      (:func:`train_capsule_norms`, :meth:`in_frozen_stage`). It returns the
      module, as ``nn.Module.train`` does.
    """

    #: Names of the replaced modules, as the swap returns them.
    hgw_layers: List[str]

    def swap_resnet_stages(self, hgw_cfg: Optional[dict],
                           stage_with_hgw: Sequence[bool]):
        """Capsules in ``conv2`` of every block of the stages of a stock
        ResNet (``res_layers``, ``num_stages`` of them) that
        ``stage_with_hgw`` flags (:func:`swap_block_convs`); sets
        ``stage_with_hgw`` and ``hgw_layers``."""
        check_stage_flags(stage_with_hgw, self.num_stages, 'stage_with_hgw')
        self.stage_with_hgw = tuple(stage_with_hgw)
        self.hgw_layers = swap_block_convs(self, self.res_layers,
                                           stage_with_hgw, hgw_cfg)
        # The stock constructor froze its stages before the swap: the new
        # layers of frozen stages are frozen now.
        self._freeze_stages()

    def in_frozen_stage(self, name: str) -> bool:
        """Whether the submodule ``name`` lies in a stage the stock backbone
        freezes: in a ResNet, stage ``i`` (``res_layers[i]``, i.e.
        ``layer{i+1}``) for ``i < frozen_stages``. Backbones without
        ``res_layers`` (UNet) freeze no stage."""
        stages = list(getattr(self, 'res_layers', ()))
        stage = name.split('.')[0]
        return stage in stages and stages.index(stage) < self.frozen_stages

    def init_weights(self):
        super().init_weights()
        report_random_capsules(self, self.hgw_layers)

    def train(self, mode: bool = True):
        super().train(mode)
        if mode and self.norm_eval:
            train_capsule_norms(self, frozen=self.in_frozen_stage)
        return self
