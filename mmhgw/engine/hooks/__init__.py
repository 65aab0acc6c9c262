from .beta_warmup import HGWBetaWarmupHook, hgw_modules
from .rank_consistency import RankConsistencyHook

__all__ = ['HGWBetaWarmupHook', 'RankConsistencyHook', 'hgw_modules']
