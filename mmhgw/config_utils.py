"""Config helpers shared by the tools."""
from mmengine.config import Config


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


def sync_bn_to_bn(node):
    """Turn every ``SyncBN`` norm config under ``node`` into ``BN``, in
    place (SyncBN needs CUDA and a process group)."""
    if isinstance(node, dict):
        if node.get('type') == 'SyncBN':
            node['type'] = 'BN'
        for value in node.values():
            sync_bn_to_bn(value)
    elif isinstance(node, (list, tuple)):
        for value in node:
            sync_bn_to_bn(value)
