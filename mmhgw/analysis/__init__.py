"""Model analysis: FLOP counting that includes the HGW solver's work."""
from .flops import (ELEMENTWISE_OPS, REDUCTION_OPS, ROUTING_OP, FlopReport,
                    count_flops, einsum_flops, elementwise_flops,
                    flop_analyzer, flop_report, hgw_op_handles,
                    hgw_routing_flops, matmul_flops, reduction_flops,
                    register_with_mmengine)

register_with_mmengine()

__all__ = [
    'ELEMENTWISE_OPS', 'REDUCTION_OPS', 'ROUTING_OP', 'FlopReport',
    'count_flops', 'einsum_flops', 'elementwise_flops', 'flop_analyzer',
    'flop_report', 'hgw_op_handles', 'hgw_routing_flops', 'matmul_flops',
    'reduction_flops', 'register_with_mmengine'
]
