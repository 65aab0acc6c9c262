"""HGWCaps-UNet for MMSegmentation."""
from typing import Optional, Sequence

from mmhgw.registry import SEG_MODELS
from .capsule_swap import CapsuleSwapMixin, check_stage_flags, swap_conv_module

__all__ = []


def _swap_conv_block(block, hgw_cfg):
    """Capsules in every 3x3 ConvModule of a UNet ``BasicConvBlock``, with
    fresh norms after them."""
    for conv_module in block.convs:
        swap_conv_module(conv_module, hgw_cfg)


if SEG_MODELS is not None:
    from mmseg.models.backbones import UNet
    from mmseg.models.backbones.unet import BasicConvBlock

    @SEG_MODELS.register_module()
    class HGWCapsUNet(CapsuleSwapMixin, UNet):
        """Stock mmseg ``UNet`` with HGW capsules in the 3x3 convolutions of
        chosen encoder and decoder stages (default: the deepest of each).
        The paper does not say where its capsule UNet's layers sit; its
        parameter share, three quarters of the stock UNet's, is that of
        capsules in the deepest decoder stage alone
        (``enc_with_hgw=(False,) * 5``); docs/evidence.md compares the two.

        Stock arguments keep their positions (``HGWCapsUNet(3, 64, 5)`` is
        ``UNet(3, 64, 5)`` with capsules); the capsule options are
        keyword-only.

        The norm after each capsule layer (in the same ``ConvModule``) is a
        fresh one, named ``hgw_<name>`` (e.g. ``hgw_bn``): no plain
        checkpoint fills it, and it trains in train mode also under
        ``norm_eval=True`` (the capsule output has statistics of its own);
        every other norm keeps the stock semantics.

        Args:
            *args: the stock UNet's positional arguments.
            hgw_cfg: config of the capsule layer (``type='HGWCaps'`` and its
                arguments; geometry comes from the replaced convolution).
                Default: ``dict(type='HGWCaps')``.
            enc_with_hgw: per encoder stage (``num_stages`` entries).
                Default (None): the deepest stage only.
            dec_with_hgw: per decoder stage, deepest last
                (``num_stages - 1`` entries, the order of
                ``UNet.decoder``). Default (None): the deepest stage only.
            **kwargs: the stock UNet's keyword arguments.
        """

        def __init__(self, *args, hgw_cfg: Optional[dict] = None,
                     enc_with_hgw: Optional[Sequence[bool]] = None,
                     dec_with_hgw: Optional[Sequence[bool]] = None, **kwargs):
            super().__init__(*args, **kwargs)
            n = self.num_stages
            if enc_with_hgw is None:
                enc_with_hgw = (False, ) * (n - 1) + (True, )
            if dec_with_hgw is None:
                dec_with_hgw = (False, ) * (n - 2) + (True, )
            check_stage_flags(enc_with_hgw, n, 'enc_with_hgw')
            check_stage_flags(dec_with_hgw, n - 1, 'dec_with_hgw')
            self.enc_with_hgw = tuple(enc_with_hgw)
            self.dec_with_hgw = tuple(dec_with_hgw)
            self.hgw_layers = []
            for i, flag in enumerate(enc_with_hgw):
                if flag:
                    block = [
                        m for m in self.encoder[i]
                        if isinstance(m, BasicConvBlock)
                    ][0]
                    _swap_conv_block(block, hgw_cfg)
                    self.hgw_layers.append(f'encoder.{i}')
            for i, flag in enumerate(dec_with_hgw):
                if flag:
                    _swap_conv_block(self.decoder[i].conv_block, hgw_cfg)
                    self.hgw_layers.append(f'decoder.{i}.conv_block')

    __all__.append('HGWCapsUNet')
