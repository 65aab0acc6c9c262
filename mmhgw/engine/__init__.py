from .checkpoint import allow_mmengine_checkpoints, load_checkpoint_file
from .hooks import (CheckpointFitHook, HGWBetaWarmupHook, HGWLossScaleHook,
                    NonFiniteGuardHook, RankConsistencyHook, RecomputeBNHook,
                    RNGStateHook, hgw_modules, load_fitting_weights,
                    loss_factor, recompute_bn_statistics)

__all__ = [
    'allow_mmengine_checkpoints', 'load_checkpoint_file', 'CheckpointFitHook',
    'HGWBetaWarmupHook', 'HGWLossScaleHook', 'NonFiniteGuardHook',
    'RankConsistencyHook', 'RecomputeBNHook', 'RNGStateHook', 'hgw_modules',
    'load_fitting_weights', 'loss_factor', 'recompute_bn_statistics'
]
