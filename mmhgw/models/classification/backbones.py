"""Backbones for ImageNet and CIFAR pretraining with MMPretrain.

The ImageNet backbones are the very classes that MMDetection
(``HGWCapsResNet``) and MMSegmentation (``HGWCapsResNetV1c``) use, registered
once more in MMPretrain's registry. A classifier trained with them therefore
saves ``backbone.*`` keys in exactly the layout the detection and
segmentation backbones load (``init_cfg=dict(type='Pretrained',
prefix='backbone.', checkpoint=...)``); MMPretrain's own ResNetV1c names its
deep stem differently (``stem.0.conv`` against mmseg's ``stem.0``), so it
could not serve.

The CIFAR ResNets (depth 6n + 2: 20, 32, 44, 56, 110) are the three-stage
networks of He et al. that the paper's CIFAR tables use: a 3x3 stem, stages
of 16, 32 and 64 channels. The last stage's 64 channels are the paper's
32 capsule types of dimension 2.
"""
from typing import Optional, Sequence

import torch.nn as nn
from mmcv.cnn import build_conv_layer, build_norm_layer

from mmhgw.registry import CLS_MODELS, DET_MODELS

__all__ = []

if CLS_MODELS is not None and DET_MODELS is not None:
    from mmdet.models.backbones import ResNet as DetResNet
    from mmdet.models.backbones.resnet import BasicBlock

    from ..backbones.capsule_swap import CapsuleSwapMixin
    from ..backbones.hgwcaps_resnet import HGWCapsResNet

    CLS_MODELS.register_module(module=HGWCapsResNet)
    try:
        from ..backbones.hgwcaps_resnet import HGWCapsResNetV1c
        CLS_MODELS.register_module(module=HGWCapsResNetV1c)
    except ImportError:  # mmseg missing: only the mmdet layout
        pass

    @CLS_MODELS.register_module()
    class CIFARResNet(DetResNet):
        """Three-stage CIFAR ResNet (He et al. 2016, Sec. 4.2) on MMDetection's
        ResNet: 3x3 stride-1 stem, no max pooling, ``BasicBlock`` stages of
        ``base_channels * (1, 2, 4)`` channels and strides (1, 2, 2).

        Args:
            depth: 6n + 2, one of :attr:`arch_settings` (n blocks per
                stage).
            base_channels: channels of the stem and the first stage
                (paper: 16).
            num_stages: 3 (kept an argument for the stock signature).
            strides, dilations: per stage.
            out_indices: stages whose output is returned (default: the
                last, as a classifier needs).
            norm_eval: keep BN in eval mode while training (off by default:
                this backbone is trained from scratch).
            **kwargs: MMDetection ResNet's other arguments.
        """
        arch_settings = {
            20: (BasicBlock, (3, 3, 3)),
            32: (BasicBlock, (5, 5, 5)),
            44: (BasicBlock, (7, 7, 7)),
            56: (BasicBlock, (9, 9, 9)),
            110: (BasicBlock, (18, 18, 18)),
        }

        def __init__(self, depth: int, base_channels: int = 16,
                     num_stages: int = 3, strides: Sequence[int] = (1, 2, 2),
                     dilations: Sequence[int] = (1, 1, 1),
                     out_indices: Sequence[int] = (2, ),
                     norm_eval: bool = False, **kwargs):
            super().__init__(depth=depth, base_channels=base_channels,
                             num_stages=num_stages, strides=strides,
                             dilations=dilations, out_indices=out_indices,
                             norm_eval=norm_eval, **kwargs)

        def _make_stem_layer(self, in_channels: int, stem_channels: int):
            # 32x32 inputs: the ImageNet stem's 4x downsampling would leave
            # 2x2 maps in the last stage.
            self.conv1 = build_conv_layer(self.conv_cfg, in_channels,
                                          stem_channels, kernel_size=3,
                                          stride=1, padding=1, bias=False)
            self.norm1_name, norm1 = build_norm_layer(self.norm_cfg,
                                                      stem_channels, postfix=1)
            self.add_module(self.norm1_name, norm1)
            self.relu = nn.ReLU(inplace=True)
            self.maxpool = nn.Identity()

    @CLS_MODELS.register_module()
    class HGWCapsCIFARResNet(CapsuleSwapMixin, CIFARResNet):
        """:class:`CIFARResNet` with HGW capsules in the 3x3 convolution
        (``conv2``) of every block of the flagged stages (default: the last
        stage, 64 channels = 32 capsule types of dimension 2, as the paper).

        The blocks keep their BN and residual connection (the paper drops
        both in its CIFAR networks): the layout then stays that of the stock
        network, so the same checkpoint tools apply, and the BN after the
        capsule layer is what conversion from a stock network fits.

        That BN is a fresh one, named ``hgw_bn2``; as in the ImageNet
        capsule ResNets, it trains in train mode (batch statistics, running
        statistics updated) also under ``norm_eval=True``, except in frozen
        stages, and every other norm keeps the stock semantics. The stock
        arguments are taken as :class:`CIFARResNet` takes them; the capsule
        options are keyword-only.

        Args:
            *args: :class:`CIFARResNet`'s positional arguments (``depth``
                first).
            hgw_cfg: config of the capsule layer (``type='HGWCaps'`` and its
                arguments; geometry comes from the replaced convolution;
                its default of 32 types gives dimension 2 on 64 channels).
                Default: ``dict(type='HGWCaps')``.
            stage_with_hgw: per stage, whether its blocks get capsules.
                Default: ``(False, False, True)``, the last stage.
            **kwargs: :class:`CIFARResNet`'s keyword arguments.
        """

        def __init__(self, *args, hgw_cfg: Optional[dict] = None,
                     stage_with_hgw: Sequence[bool] = (False, False, True),
                     **kwargs):
            super().__init__(*args, **kwargs)
            self.swap_resnet_stages(hgw_cfg, stage_with_hgw)

    __all__ += ['CIFARResNet', 'HGWCapsCIFARResNet']
