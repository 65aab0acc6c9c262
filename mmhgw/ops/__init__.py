"""Operators with fused kernels (one module per op, kernels in ``csrc/``)."""
from .hgw_routing import (BACKENDS, OP_NAME, cpp_available, cross_cost,
                          hgw_routing, hgw_routing_decomposition,
                          hgw_routing_reference, poisoned_problems,
                          resolve_backend, triton_available)

__all__ = [
    'BACKENDS', 'OP_NAME', 'cpp_available', 'cross_cost', 'hgw_routing',
    'hgw_routing_decomposition', 'hgw_routing_reference',
    'poisoned_problems', 'resolve_backend', 'triton_available'
]
