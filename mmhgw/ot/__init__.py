"""Optimal-transport maths of HGWCaps: pure torch, no OpenMMLab import."""
from .hgw import (DISTANCE_FLOOR, GWTerms, HGWResult, bound_distance,
                  embedding_distance,
                  gw_apply, gw_factors, gw_tensor_product, gw_terms,
                  hgw_distance,
                  hgw_plan, hgw_value, kl_matrix_divergence, mix_structure,
                  plan_from_terms, round_to_polytope, safe_log, sinkhorn_log)

__all__ = [
    'DISTANCE_FLOOR', 'GWTerms', 'HGWResult', 'bound_distance',
    'embedding_distance', 'gw_apply', 'gw_factors',
    'gw_tensor_product', 'gw_terms', 'hgw_distance', 'hgw_plan', 'hgw_value',
    'kl_matrix_divergence', 'mix_structure', 'plan_from_terms',
    'round_to_polytope', 'safe_log',
    'sinkhorn_log'
]
