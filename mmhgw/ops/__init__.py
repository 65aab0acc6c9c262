"""Operators with fused kernels (one module per op, kernels in ``csrc/``)."""
from .hgw_routing import (BACKENDS, cpp_available, cross_cost, hgw_routing,
                          hgw_routing_reference, resolve_backend,
                          triton_available)

__all__ = [
    'BACKENDS', 'cpp_available', 'cross_cost', 'hgw_routing',
    'hgw_routing_reference', 'resolve_backend', 'triton_available'
]
