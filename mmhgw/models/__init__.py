from . import backbones, necks  # noqa: F401  (register into mmdet / mmseg)
from .layers import CapsulePool, HGWCaps, attach_aux_loss

__all__ = ['CapsulePool', 'HGWCaps', 'attach_aux_loss']
