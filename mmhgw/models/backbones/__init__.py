from .capsule_swap import CapsuleSwapMixin, capsule_like  # noqa: F401
from .hgwcaps_resnet import *  # noqa: F401,F403
from .hgwcaps_resnet import __all__ as _resnets
from .hgwcaps_unet import *  # noqa: F401,F403
from .hgwcaps_unet import __all__ as _unets

__all__ = ['CapsuleSwapMixin', 'capsule_like'] + _resnets + _unets
