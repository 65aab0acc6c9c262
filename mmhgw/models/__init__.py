from .layers import CapsulePool, HGWCaps, attach_aux_loss

__all__ = ['CapsulePool', 'HGWCaps', 'attach_aux_loss']
