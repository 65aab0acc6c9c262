from . import functional  # noqa: F401
from .transforms import InterpolationMode, RandomResizedCrop  # noqa: F401
