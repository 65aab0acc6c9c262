from . import boxes  # noqa: F401
from .boxes import box_area, box_iou, generalized_box_iou  # noqa: F401
