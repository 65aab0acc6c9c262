from .beta_warmup import HGWBetaWarmupHook, hgw_modules
from .bn_statistics import RecomputeBNHook, recompute_bn_statistics
from .checkpoint_fit import CheckpointFitHook, load_fitting_weights
from .interrupt_checkpoint import InterruptCheckpointHook
from .loss_scale import HGWLossScaleHook, loss_factor
from .non_finite_guard import NonFiniteGuardHook
from .rank_consistency import RankConsistencyHook
from .rng_state import RNGStateHook

__all__ = [
    'CheckpointFitHook', 'HGWBetaWarmupHook', 'HGWLossScaleHook',
    'InterruptCheckpointHook', 'NonFiniteGuardHook', 'RankConsistencyHook',
    'RecomputeBNHook', 'RNGStateHook', 'hgw_modules', 'load_fitting_weights',
    'loss_factor', 'recompute_bn_statistics'
]
