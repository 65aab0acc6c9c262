from . import backbones, necks  # noqa: F401  (register into mmdet / mmseg)
from . import classification, heads  # noqa: F401  (register into mmpretrain)
from .layers import CapsulePool, HGWCaps, attach_aux_loss

__all__ = ['CapsulePool', 'HGWCaps', 'attach_aux_loss']
