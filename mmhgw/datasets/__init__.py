from .coco_checks import install_coco_checks
from .isic2018 import *  # noqa: F401,F403
from .isic2018 import __all__ as _isic
from .synthetic_cls import make_shape_classification
from .transforms import AffineWarp, InstancesFromLabels, affine_matrix

install_coco_checks()

__all__ = _isic + [
    'make_shape_classification', 'install_coco_checks', 'AffineWarp',
    'InstancesFromLabels', 'affine_matrix'
]
