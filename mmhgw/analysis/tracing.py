"""A detector or segmentor as a plain ``module(image)`` for tracing."""
from typing import Optional, Tuple

import torch
import torch.nn as nn
from torch import Tensor

from mmhgw.config_utils import load_offline_config, merge_cfg_options

#: The config scopes whose models :class:`TensorModeModel` can trace.
SCOPES = ('mmdet', 'mmseg')


def _flatten(out):
    if torch.is_tensor(out):
        return (out, )
    if isinstance(out, dict):
        out = list(out.values())
    if isinstance(out, (list, tuple)):
        return tuple(t for item in out for t in _flatten(item))
    return ()


def _data_sample(scope: str, height: int, width: int):
    meta = dict(img_shape=(height, width), ori_shape=(height, width),
                pad_shape=(height, width), batch_input_shape=(height, width),
                scale_factor=(1.0, 1.0))
    if scope == 'mmdet':
        from mmdet.structures import DetDataSample
        return DetDataSample(metainfo=meta)
    if scope == 'mmseg':
        from mmseg.structures import SegDataSample
        return SegDataSample(metainfo=meta)
    raise ValueError(f'scope must be one of {SCOPES}, got {scope!r}')


class TensorModeModel(nn.Module):
    """``model(image, [data_sample], mode='tensor')`` with the outputs
    flattened to a tuple of tensors, as ``torch.jit`` tracing wants.

    The tensor mode is the network without pre- and post-processing
    (mmdet: backbone, neck, RPN proposals and RoI heads; mmseg: backbone and
    decode head), the part mmdet's and mmseg's own FLOP tools count.

    Args:
        model: a built mmdet detector or mmseg segmentor.
        scope: ``'mmdet'`` or ``'mmseg'`` (the config's ``default_scope``).
        shape: (height, width) of the input image.
    """

    def __init__(self, model: nn.Module, scope: str, shape: Tuple[int, int]):
        super().__init__()
        self.model = model
        self.data_sample = _data_sample(scope, *shape)

    def forward(self, image: Tensor) -> Tuple[Tensor, ...]:
        out = self.model(image, [self.data_sample], mode='tensor')
        return _flatten(out)


def add_shape_arg(parser):
    """``--shape H [W]``, the input size of the tools that trace a model;
    :func:`check_shape` reads it with the model's config."""
    parser.add_argument(
        '--shape', type=int, nargs='+',
        help='input height and width (one value: square); default: a '
        'segmentor\'s crop size, a detector\'s 800 x 1333')


#: A detector's input when no shape is given: the short and long side of
#: the COCO test scale the configs resize to.
DETECTOR_SHAPE = (800, 1333)


def check_shape(shape, cfg=None) -> Tuple[int, int]:
    """``--shape`` as (height, width): one value means a square. Without
    one (None), the input ``cfg``'s model is made for: a segmentor's
    ``data_preprocessor.size`` (the crop it pads to) or ``crop_size``, a
    detector's :data:`DETECTOR_SHAPE`. A segmentor's config with neither
    is refused: no one size fits every segmentor (a UNet takes only
    multiples of its downsampling)."""
    if shape is None:
        shape = DETECTOR_SHAPE
        if cfg is not None and cfg.get('default_scope') == 'mmseg':
            size = (cfg.model.get('data_preprocessor') or {}).get('size')
            shape = size or cfg.get('crop_size')
            if not shape:
                raise ValueError(
                    'the config sets neither model.data_preprocessor.size '
                    'nor crop_size: give the input size as --shape H W')
    shape = tuple(int(s) for s in shape)
    if len(shape) == 1:
        shape = shape * 2
    if len(shape) != 2 or min(shape) < 1:
        raise ValueError(f'shape must be one or two positive ints (H W), '
                         f'got {shape}')
    return shape


def load_traced_config(config: str, cfg_options: Optional[dict] = None,
                       shape=None):
    """The config of a model to trace, with ``cfg_options`` merged
    (:func:`~mmhgw.config_utils.merge_cfg_options`), its scope (one of
    :data:`SCOPES`) and the input shape (:func:`check_shape`): every check
    before a model is built.

    Returns:
        tuple: (cfg, scope, (height, width)).
    """
    cfg = load_offline_config(config)
    merge_cfg_options(cfg, cfg_options)
    scope = cfg.get('default_scope')
    if scope not in SCOPES:
        raise ValueError(f'{config}: default_scope must be one of {SCOPES}, '
                         f'got {scope!r}')
    return cfg, scope, check_shape(shape, cfg)
