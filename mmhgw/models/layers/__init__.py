from .aux_loss import attach_aux_loss
from .capsule_pool import CapsulePool
from .hgw_caps import HGWCaps, count_structure, zipf_structure

__all__ = [
    'attach_aux_loss', 'CapsulePool', 'HGWCaps', 'count_structure',
    'zipf_structure'
]
