"""Loading configs for tests and offline tools: no downloads, CPU norms."""
from typing import Optional, Tuple

from mmengine.config import Config
from mmengine.registry import init_default_scope


def load_config(path: str) -> Config:
    """``Config.fromfile``, also for package-scoped stock configs
    (``'mmdet::...'``)."""
    if '::' in path:
        # Resolved as a config inheriting it would resolve it (get_config
        # would add _scope_ keys that no inheriting config has).
        import os
        import tempfile
        fd, tmp = tempfile.mkstemp(suffix='.py')
        try:
            with os.fdopen(fd, 'w') as f:
                f.write(f'_base_ = [{path!r}]\n')
            return Config.fromfile(tmp)
        finally:
            os.remove(tmp)
    return Config.fromfile(path)


def _sync_bn_to_bn(node):
    if isinstance(node, dict):
        if node.get('type') == 'SyncBN':
            node['type'] = 'BN'
        for value in node.values():
            _sync_bn_to_bn(value)
    elif isinstance(node, (list, tuple)):
        for value in node:
            _sync_bn_to_bn(value)


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
    _sync_bn_to_bn(cfg.model)
    if seg_size is not None:
        cfg.model.data_preprocessor.size = seg_size
    return cfg


def build_model_for_test(cfg: Config):
    """Build ``cfg.model`` in the config's default scope, weights
    initialised."""
    init_default_scope(cfg.get('default_scope', 'mmengine'))
    from mmengine.registry import MODELS
    model = MODELS.build(cfg.model)
    model.init_weights()
    return model
