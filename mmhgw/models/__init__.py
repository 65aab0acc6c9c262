# Registration: backbones and necks into mmdet / mmseg, classification and
# heads into mmpretrain.
from . import backbones, classification, heads, necks  # noqa: F401
from .layers import CapsulePool, HGWCaps, attach_aux_loss

__all__ = ['CapsulePool', 'HGWCaps', 'attach_aux_loss']
