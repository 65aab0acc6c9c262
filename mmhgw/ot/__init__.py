"""Optimal-transport maths of HGWCaps: pure torch, no OpenMMLab import."""
from .hgw import (DISTANCE_FLOOR, MIN_EPS, GWTerms, HGWResult,
                  bound_distance, check_solver_options, embedding_distance,
                  gw_apply, gw_factors, gw_tensor_product, gw_terms,
                  hgw_distance,
                  hgw_plan, hgw_value, kl_matrix_divergence, mix_structure,
                  plan_from_terms, power_of_two_scale, round_to_polytope,
                  safe_log, scaled_squared_distance, sinkhorn_log)

__all__ = [
    'DISTANCE_FLOOR', 'MIN_EPS', 'GWTerms', 'HGWResult', 'bound_distance',
    'check_solver_options', 'embedding_distance', 'gw_apply', 'gw_factors',
    'gw_tensor_product', 'gw_terms', 'hgw_distance', 'hgw_plan', 'hgw_value',
    'kl_matrix_divergence', 'mix_structure', 'plan_from_terms',
    'power_of_two_scale', 'round_to_polytope', 'safe_log',
    'scaled_squared_distance', 'sinkhorn_log'
]
