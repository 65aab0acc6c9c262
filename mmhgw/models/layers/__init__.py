from mmhgw.ot import count_structure, zipf_structure
from .aux_loss import attach_aux_loss
from .capsule_pool import CapsulePool
from .hgw_caps import HGWCaps
from .hgw_caps_structures import RoutingInputs, Structures

__all__ = [
    'attach_aux_loss', 'CapsulePool', 'HGWCaps', 'RoutingInputs', 'Structures',
    'count_structure', 'zipf_structure'
]
