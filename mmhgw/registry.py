"""The registries mmhgw fills.

Generic pieces (the capsule layer, hooks) go into mmengine's root registries,
which every OpenMMLab scope falls back to, so ``build_conv_layer`` finds
``HGWCaps`` under ``default_scope='mmdet'`` and ``'mmseg'`` alike. Detection,
segmentation and classification models go into mmdet's, mmseg's and
mmpretrain's own registries, looked up here only when those packages are
installed: mmhgw imports without them. (``mmpretrain.registry`` imports none
of mmpretrain's models, so looking it up stays cheap.)
"""
import importlib
import importlib.util

from mmengine.registry import HOOKS, MODELS


def package_available(name: str) -> bool:
    """Whether ``name`` can be imported, without importing it."""
    return importlib.util.find_spec(name) is not None


def downstream_registry(package: str, name: str):
    """``<package>.registry.<name>``, or None when ``package`` is missing."""
    if not package_available(package):
        return None
    return getattr(importlib.import_module(f'{package}.registry'), name)


DET_MODELS = downstream_registry('mmdet', 'MODELS')
SEG_MODELS = downstream_registry('mmseg', 'MODELS')
SEG_DATASETS = downstream_registry('mmseg', 'DATASETS')
SEG_TRANSFORMS = downstream_registry('mmseg', 'TRANSFORMS')
CLS_MODELS = downstream_registry('mmpretrain', 'MODELS')

__all__ = [
    'MODELS', 'HOOKS', 'DET_MODELS', 'SEG_MODELS', 'SEG_DATASETS',
    'SEG_TRANSFORMS', 'CLS_MODELS', 'package_available', 'downstream_registry'
]
