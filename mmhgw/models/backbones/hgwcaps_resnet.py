"""HGWCaps-ResNet backbones for MMDetection and MMSegmentation."""
from typing import Optional, Sequence

from mmhgw.registry import DET_MODELS, SEG_MODELS
from .capsule_swap import CapsuleSwapMixin

__all__ = []

if DET_MODELS is not None:
    from mmdet.models.backbones import ResNet as DetResNet

    @DET_MODELS.register_module()
    class HGWCapsResNet(CapsuleSwapMixin, DetResNet):
        """MMDetection's ``ResNet`` whose blocks in the stages flagged by
        ``stage_with_hgw`` use HGW capsules for their 3x3 convolution
        (``conv2`` of Bottleneck and BasicBlock, so depths 18 to 152).

        Every stock argument keeps its meaning: ``depth``, ``out_indices``,
        ``frozen_stages`` (capsule layers of frozen stages are frozen too),
        ``norm_eval``, ``with_cp``, ``plugins``, ``dcn`` (in stages without
        capsules), ``init_cfg``. With
        ``init_cfg=dict(type='Pretrained', checkpoint=...)`` a plain ResNet
        checkpoint fills every non-capsule layer; the capsule layers that
        stay random are named in a warning.

        The stock arguments are taken as the stock class takes them,
        positionally too (``HGWCapsResNet(50)`` is ``ResNet(50)`` with
        capsules); the capsule options are keyword-only, so they can never
        shift a stock argument's position.

        The norm after each capsule layer (``bn2`` of the block) is a fresh
        one, named ``hgw_bn2``: no plain checkpoint fills it, and it trains
        in train mode (batch statistics, running statistics updated) also
        under ``norm_eval=True``, since the statistics of the convolution
        it followed do not describe the capsule output. Every other norm
        keeps the stock semantics; in frozen stages the new norms are
        frozen too.

        Args:
            *args: the stock ``ResNet``'s positional arguments.
            hgw_cfg: config of the capsule layer (``type='HGWCaps'`` and its
                arguments; geometry comes from the replaced convolution).
                Default: ``dict(type='HGWCaps')``.
            stage_with_hgw: per stage, whether its blocks get capsules.
                Default: ``(False, False, True, True)``, the last two
                stages, as the paper.
            **kwargs: the stock ``ResNet``'s keyword arguments.
        """

        def __init__(self, *args, hgw_cfg: Optional[dict] = None,
                     stage_with_hgw: Sequence[bool] = (False, False, True,
                                                       True), **kwargs):
            super().__init__(*args, **kwargs)
            self.swap_resnet_stages(hgw_cfg, stage_with_hgw)

    __all__.append('HGWCapsResNet')

if SEG_MODELS is not None:
    from mmseg.models.backbones import ResNetV1c as SegResNetV1c

    @SEG_MODELS.register_module()
    class HGWCapsResNetV1c(CapsuleSwapMixin, SegResNetV1c):
        """MMSegmentation's ``ResNetV1c`` (deep stem, dilated stages) whose
        blocks in the stages flagged by ``stage_with_hgw`` use HGW capsules
        for their 3x3 convolution (``conv2``), with the geometry the stock
        arguments give it (``dilations``, ``multi_grid``,
        ``contract_dilation``).

        As the stock ``ResNetV1c``, it takes keyword arguments only and
        fixes ``deep_stem`` and ``avg_down`` itself. Everything else is as
        in :class:`HGWCapsResNet`: the stock arguments keep their meaning, a
        plain ``ResNetV1c`` checkpoint fills every non-capsule layer (the
        rest is named in a warning), and the fresh norm after each capsule
        layer (``hgw_bn2``) trains also under ``norm_eval=True``, except in
        frozen stages.

        Args:
            hgw_cfg: config of the capsule layer (``type='HGWCaps'`` and its
                arguments; geometry comes from the replaced convolution).
                Default: ``dict(type='HGWCaps')``.
            stage_with_hgw: per stage, whether its blocks get capsules.
                Default: ``(False, False, True, True)``, the last two
                stages, as the paper.
            **kwargs: the stock ``ResNetV1c``'s arguments.
        """

        def __init__(self, *args, hgw_cfg: Optional[dict] = None,
                     stage_with_hgw: Sequence[bool] = (False, False, True,
                                                       True), **kwargs):
            super().__init__(*args, **kwargs)
            self.swap_resnet_stages(hgw_cfg, stage_with_hgw)

    __all__.append('HGWCapsResNetV1c')
