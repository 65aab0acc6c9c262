from .class_capsule_head import *  # noqa: F401,F403
from .class_capsule_head import __all__  # noqa: F401
