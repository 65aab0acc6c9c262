"""Operators with fused kernels (one module per op, kernels in ``csrc/``,
the plain torch reference of each beside it)."""
from .hgw_routing import (BACKENDS, OP_NAME, cpp_available, hgw_routing,
                          hgw_routing_decomposition, resolve_backend,
                          triton_available)
from .hgw_routing_reference import (ROUTINGS, cross_cost,
                                    hgw_routing_reference, poisoned_problems,
                                    pose_map)
from .hgw_structures import (component_structures,
                             component_structures_reference, component_terms,
                             runs_component_kernels)

__all__ = [
    'BACKENDS', 'OP_NAME', 'ROUTINGS', 'component_structures',
    'component_structures_reference', 'component_terms', 'cpp_available',
    'cross_cost', 'hgw_routing', 'hgw_routing_decomposition',
    'hgw_routing_reference', 'poisoned_problems', 'pose_map',
    'resolve_backend', 'runs_component_kernels', 'triton_available'
]
