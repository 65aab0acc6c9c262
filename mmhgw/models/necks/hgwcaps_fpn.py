"""A capsule neck: FPN whose 3x3 output convolutions are HGW capsules."""
from typing import Optional

from mmhgw.models.backbones.capsule_swap import capsule_like
from mmhgw.registry import DET_MODELS

__all__ = []

if DET_MODELS is not None:
    from mmdet.models.necks import FPN

    @DET_MODELS.register_module()
    class HGWCapsFPN(FPN):
        """Stock mmdet ``FPN`` whose 3x3 output convolutions (``fpn_convs``)
        are HGW capsule layers.

        Stock arguments keep their positions
        (``HGWCapsFPN([256, 512, 1024, 2048], 256, 5)`` is the stock call);
        the capsule options are keyword-only.

        Args:
            *args: the stock FPN's positional arguments.
            hgw_cfg: config of the capsule layer (``type='HGWCaps'`` and its
                arguments); ``out_channels`` must be divisible by its
                ``out_types``.
            hgw_extra_convs: also the stride-2 extra convolutions
                (``add_extra_convs``); their input may be a backbone level.
            **kwargs: the stock FPN's keyword arguments.
        """

        def __init__(self, *args, hgw_cfg: Optional[dict] = None,
                     hgw_extra_convs: bool = False, **kwargs):
            super().__init__(*args, **kwargs)
            levels = self.backbone_end_level - self.start_level
            count = len(self.fpn_convs) if hgw_extra_convs else levels
            for i in range(count):
                self.fpn_convs[i].conv = capsule_like(self.fpn_convs[i].conv,
                                                      hgw_cfg)

    __all__.append('HGWCapsFPN')
