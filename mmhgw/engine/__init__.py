from .checkpoint import allow_mmengine_checkpoints
from .hooks import (HGWBetaWarmupHook, NonFiniteGuardHook, RankConsistencyHook,
                    RNGStateHook, hgw_modules)

__all__ = [
    'allow_mmengine_checkpoints', 'HGWBetaWarmupHook', 'NonFiniteGuardHook',
    'RankConsistencyHook', 'RNGStateHook', 'hgw_modules'
]
