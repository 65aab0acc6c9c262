"""Capsule pooling as an MMPretrain neck (paper Sec. Q2)."""
from typing import Tuple, Union

from mmengine.model import BaseModule
from torch import Tensor

from mmhgw.registry import CLS_MODELS
from ..layers.capsule_pool import CapsulePool

__all__ = []

if CLS_MODELS is not None:

    @CLS_MODELS.register_module()
    class CapsulePoolNeck(BaseModule):
        """:class:`~mmhgw.models.layers.CapsulePool` in place of
        MMPretrain's ``GlobalAveragePooling``: the same interface (a tuple
        of ``[B, C, H, W]`` maps in, a tuple of ``[B, C]`` vectors out), but
        each capsule type is pooled to its activation-weighted mean capsule.

        Args:
            num_types: capsule types of the input (paper, CIFAR: 32).
            weighted: weight capsules by their length (False: mean pooling).
            init_cfg: mmengine initialisation config.
        """

        def __init__(self, num_types: int = 32, weighted: bool = True,
                     init_cfg=None):
            super().__init__(init_cfg=init_cfg)
            self.pool = CapsulePool(num_types=num_types, weighted=weighted)

        def forward(self, inputs: Union[Tensor, Tuple[Tensor, ...]]):
            if isinstance(inputs, Tensor):
                return self.pool(inputs).flatten(1)
            return tuple(self.pool(x).flatten(1) for x in inputs)

    __all__.append('CapsulePoolNeck')
