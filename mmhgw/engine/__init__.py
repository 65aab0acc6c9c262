from .checkpoint import allow_mmengine_checkpoints
from .hooks import (HGWBetaWarmupHook, HGWLossScaleHook, NonFiniteGuardHook,
                    RankConsistencyHook, RNGStateHook, hgw_modules,
                    loss_factor)

__all__ = [
    'allow_mmengine_checkpoints', 'HGWBetaWarmupHook', 'HGWLossScaleHook',
    'NonFiniteGuardHook', 'RankConsistencyHook', 'RNGStateHook',
    'hgw_modules', 'loss_factor'
]
