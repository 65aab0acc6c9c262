"""Model analysis: FLOP counting that includes the HGW solver's work."""
from .flops import (ELEMENTWISE_OPS, REDUCTION_OPS, FlopReport, count_flops,
                    einsum_flops, elementwise_flops, flop_analyzer,
                    flop_report, hgw_op_handles, matmul_flops,
                    reduction_flops)

__all__ = [
    'ELEMENTWISE_OPS', 'REDUCTION_OPS', 'FlopReport', 'count_flops',
    'einsum_flops', 'elementwise_flops', 'flop_analyzer', 'flop_report',
    'hgw_op_handles',
    'matmul_flops', 'reduction_flops'
]
