from .checkpoint import allow_mmengine_checkpoints
from .hooks import (HGWBetaWarmupHook, HGWLossScaleHook, RankConsistencyHook,
                    hgw_modules, loss_factor)

__all__ = [
    'allow_mmengine_checkpoints', 'HGWBetaWarmupHook', 'HGWLossScaleHook',
    'RankConsistencyHook', 'hgw_modules', 'loss_factor'
]
