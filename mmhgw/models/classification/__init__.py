"""Classification models for MMPretrain (registered only when it is
installed): HGWCaps ResNets, the CIFAR ResNets of the paper and capsule
pooling as a neck. The class capsule head is in :mod:`mmhgw.models.heads`."""
from .backbones import *  # noqa: F401,F403
from .backbones import __all__ as _backbones
from .necks import *  # noqa: F401,F403
from .necks import __all__ as _necks

__all__ = _backbones + _necks
