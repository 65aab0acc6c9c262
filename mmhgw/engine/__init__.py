from .checkpoint import allow_mmengine_checkpoints
from .hooks import HGWBetaWarmupHook, RankConsistencyHook, hgw_modules

__all__ = [
    'allow_mmengine_checkpoints', 'HGWBetaWarmupHook', 'RankConsistencyHook',
    'hgw_modules'
]
