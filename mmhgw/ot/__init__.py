"""Optimal-transport maths of HGWCaps: pure torch, no OpenMMLab import.

The one public face of the solver: ops and models import from here.

- :mod:`.numerics`: guarded logs and exps, bounded distances, constants.
- :mod:`.gw_terms`: the GW tensor product (Eq. 10) and the HGW value.
- :mod:`.sinkhorn`: Sinkhorn and proximal iterations, rounding.
- :mod:`.solver`: option checks, chunked batched solves, ``hgw_distance``.
- :mod:`.structures`: embedding distance, observed structures (Eq. 18),
  their mixture (Eq. 21) and the regulariser's loss (Eq. reg).
"""
from .gw_terms import (LOSSES, GWFactors, GWTerms, gw_apply, gw_factors,
                       gw_tensor_product, gw_terms, hgw_value, source_factors,
                       target_factors)
from .numerics import (DISTANCE_FLOOR, MIN_EPS, bound_distance, exp_floor,
                       floored_exp, logsumexp, power_of_two_scale, safe_log,
                       scaled_squared_distance)
from .sinkhorn import round_to_polytope, sinkhorn_log
from .solver import (CPU_CHUNK_ENTRIES, GRAD_MODES, REGULARIZERS, HGWResult,
                     check_solver_options, hgw_distance, plan_from_terms,
                     solve_plan, uniform_marginals, uniform_plan)
from .structures import (count_structure, embedding_distance, kl_off_diagonal,
                         mix_structure, presence, structure, zipf_structure)

__all__ = [
    'CPU_CHUNK_ENTRIES', 'DISTANCE_FLOOR', 'GRAD_MODES', 'LOSSES', 'MIN_EPS',
    'REGULARIZERS', 'GWFactors', 'GWTerms', 'HGWResult', 'bound_distance',
    'check_solver_options', 'count_structure', 'embedding_distance',
    'exp_floor', 'floored_exp', 'gw_apply', 'gw_factors', 'gw_tensor_product',
    'gw_terms', 'hgw_distance', 'hgw_value', 'kl_off_diagonal', 'logsumexp',
    'mix_structure', 'plan_from_terms', 'power_of_two_scale', 'presence',
    'round_to_polytope', 'safe_log', 'scaled_squared_distance', 'sinkhorn_log',
    'solve_plan', 'source_factors', 'structure', 'target_factors',
    'uniform_marginals', 'uniform_plan', 'zipf_structure'
]
