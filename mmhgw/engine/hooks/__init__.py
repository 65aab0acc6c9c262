from .beta_warmup import HGWBetaWarmupHook, hgw_modules
from .loss_scale import HGWLossScaleHook, loss_factor
from .rank_consistency import RankConsistencyHook

__all__ = [
    'HGWBetaWarmupHook', 'HGWLossScaleHook', 'RankConsistencyHook',
    'hgw_modules', 'loss_factor'
]
