from .hgwcaps_fpn import *  # noqa: F401,F403
from .hgwcaps_fpn import __all__  # noqa: F401
