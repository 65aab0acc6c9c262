from .beta_warmup import HGWBetaWarmupHook, hgw_modules

__all__ = ['HGWBetaWarmupHook', 'hgw_modules']
