from .checkpoint import allow_mmengine_checkpoints, load_checkpoint_file
from .hooks import (CheckpointFitHook, HGWBetaWarmupHook, HGWLossScaleHook,
                    NonFiniteGuardHook, RankConsistencyHook, RNGStateHook,
                    hgw_modules, load_fitting_weights, loss_factor)

__all__ = [
    'allow_mmengine_checkpoints', 'load_checkpoint_file', 'CheckpointFitHook',
    'HGWBetaWarmupHook', 'HGWLossScaleHook', 'NonFiniteGuardHook',
    'RankConsistencyHook', 'RNGStateHook', 'hgw_modules',
    'load_fitting_weights', 'loss_factor'
]
