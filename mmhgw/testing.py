"""Loading configs for tests and offline tools: no downloads, CPU norms."""
import logging
from typing import Callable, Optional, Tuple

from mmengine.config import Config
from mmengine.logging import MMLogger
from mmengine.registry import init_default_scope

from .config_utils import load_config, sync_bn_to_bn


def load_config_for_test(path: str, seg_size: Optional[Tuple[int, int]] = None,
                         keep_init: bool = False) -> Config:
    """A config ready to build offline on one CPU process.

    Pretrained weights cannot be fetched offline, so ``init_cfg`` /
    ``pretrained`` are dropped (unless ``keep_init``); SyncBN becomes BN
    (it needs a process group); ``seg_size`` shrinks mmseg's fixed input
    padding size.
    """
    cfg = load_config(path)
    if not keep_init:
        cfg.model.pop('pretrained', None)
        cfg.model.backbone.init_cfg = None
    sync_bn_to_bn(cfg.model)
    if seg_size is not None:
        cfg.model.data_preprocessor.size = seg_size
    return cfg


def build_model_for_test(cfg: Config, init: bool = True):
    """Build ``cfg.model`` in the config's default scope, with its weights
    initialised when ``init``."""
    init_default_scope(cfg.get('default_scope', 'mmengine'))
    from mmengine.registry import MODELS
    model = MODELS.build(cfg.model)
    if init:
        model.init_weights()
    return model


def logged(func: Callable[[], object]) -> str:
    """The messages the current MMLogger records while ``func()`` runs,
    joined by spaces (for tests of what a model reports)."""
    records = []
    handler = logging.Handler()
    handler.emit = records.append
    logger = MMLogger.get_current_instance()
    logger.addHandler(handler)
    try:
        func()
    finally:
        logger.removeHandler(handler)
    return ' '.join(r.getMessage() for r in records)
