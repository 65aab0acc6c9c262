"""HGWCaps-ResNet backbones for MMDetection and MMSegmentation."""
from typing import Optional, Sequence

from mmhgw.registry import DET_MODELS, SEG_MODELS
from .capsule_swap import (check_stage_flags, report_random_capsules,
                           swap_block_convs, train_capsule_norms)

#: Docstring of the four-stage (ImageNet) capsule ResNets; ``{base}`` is the
#: stock class's name.
_RESNET_DOC = """Stock ``{base}`` whose blocks in the stages flagged by
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
            *args: the stock backbone's positional arguments.
            hgw_cfg: config of the capsule layer (``type='HGWCaps'`` and its
                arguments; geometry comes from the replaced convolution).
            stage_with_hgw: per stage, whether its blocks get capsules.
                Default: the last two stages, as the paper.
            **kwargs: the stock backbone's keyword arguments.
        """


def _with_capsules(base,
                   name: str,
                   stage_with_hgw: Sequence[bool] = (False, False, True,
                                                     True),
                   doc: str = _RESNET_DOC,
                   module: Optional[str] = None):
    """Subclass ``name`` of the stock ResNet ``base`` with HGW capsules.

    Args:
        base: a ResNet class with ``res_layers`` of ``BasicBlock`` or
            ``Bottleneck`` stages (mmdet's or mmseg's, or one derived from
            them).
        name: the class's name (and qualified name).
        stage_with_hgw: the default of the class's ``stage_with_hgw``, one
            flag per stage of ``base``'s default ``num_stages``.
        doc: the class's docstring; ``{base}`` becomes ``base``'s name.
        module: the module the class is bound in (default: this one), so
            that it is found there by name (pickling, documentation).
    """
    default_stage_with_hgw = tuple(stage_with_hgw)

    class HGWCapsResNetMixin(base):

        def __init__(self,
                     *args,
                     hgw_cfg: Optional[dict] = None,
                     stage_with_hgw: Sequence[bool] = default_stage_with_hgw,
                     **kwargs):
            super().__init__(*args, **kwargs)
            check_stage_flags(stage_with_hgw, self.num_stages,
                              'stage_with_hgw')
            self.stage_with_hgw = tuple(stage_with_hgw)
            self.hgw_layers = swap_block_convs(self, self.res_layers,
                                               stage_with_hgw, hgw_cfg)
            # The stock constructor froze stages before the swap.
            self._freeze_stages()

        def init_weights(self):
            super().init_weights()
            report_random_capsules(self, self.hgw_layers)

        def train(self, mode=True):
            super().train(mode)
            if mode and self.norm_eval:
                # Stage i (layer{i}) is frozen for i <= frozen_stages.
                train_capsule_norms(
                    self, frozen=lambda name: self.res_layers.index(
                        name.split('.')[0]) < self.frozen_stages)
            return self

    HGWCapsResNetMixin.__doc__ = doc.replace('{base}', base.__name__)
    HGWCapsResNetMixin.__name__ = HGWCapsResNetMixin.__qualname__ = name
    if module is not None:
        HGWCapsResNetMixin.__module__ = module
    return HGWCapsResNetMixin


__all__ = []

if DET_MODELS is not None:
    from mmdet.models.backbones import ResNet as DetResNet
    HGWCapsResNet = DET_MODELS.register_module(
        module=_with_capsules(DetResNet, 'HGWCapsResNet'))
    __all__.append('HGWCapsResNet')

if SEG_MODELS is not None:
    from mmseg.models.backbones import ResNetV1c as SegResNetV1c
    HGWCapsResNetV1c = SEG_MODELS.register_module(
        module=_with_capsules(SegResNetV1c, 'HGWCapsResNetV1c'))
    __all__.append('HGWCapsResNetV1c')
