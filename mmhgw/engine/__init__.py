from .checkpoint import allow_mmengine_checkpoints
from .hooks import HGWBetaWarmupHook, hgw_modules

__all__ = ['allow_mmengine_checkpoints', 'HGWBetaWarmupHook', 'hgw_modules']
