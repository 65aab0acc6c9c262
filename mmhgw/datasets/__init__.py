from .isic2018 import *  # noqa: F401,F403
from .isic2018 import __all__
