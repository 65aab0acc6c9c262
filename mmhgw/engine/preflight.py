"""Checks of a train / test config before the Runner starts.

``--cfg-options`` keys that would set nothing, and pretrained-weight sources
that cannot load in this environment, fail here with the key to use or the
step to take, instead of being ignored or failing deep inside mmengine.
"""
import difflib
import importlib
from typing import Dict, Iterator, List, Optional, Tuple

# Top-level config keys read after the config file is parsed. Every other
# top-level key of an OpenMMLab config (``data_root``, ``train_pipeline``,
# ``norm_cfg``, this project's ``hgw_cfg``...) is a variable of the file: its
# value was copied into the keys above while the file was read, so
# overriding it afterwards changes nothing.
RUNTIME_KEYS = frozenset({
    # mmengine 0.10.7: Runner.from_cfg and FlexibleRunner.from_cfg
    'model',
    'work_dir',
    'train_dataloader',
    'val_dataloader',
    'test_dataloader',
    'train_cfg',
    'val_cfg',
    'test_cfg',
    'auto_scale_lr',
    'optim_wrapper',
    'param_scheduler',
    'val_evaluator',
    'test_evaluator',
    'default_hooks',
    'custom_hooks',
    'data_preprocessor',
    'load_from',
    'resume',
    'launcher',
    'env_cfg',
    'log_processor',
    'log_level',
    'visualizer',
    'default_scope',
    'randomness',
    'experiment_name',
    'strategy',
    # ... and the Runners' methods, through runner.cfg
    'model_wrapper_cfg',
    'sync_bn',
    'find_unused_parameters',
    'activation_checkpointing',
    'efficient_conv_bn_eval',
    'compile',
    'init_weights_for_test_or_val',
    # the test tools' --tta; imported by config_from_args after the merge
    'tta_model',
    'tta_pipeline',
    'custom_imports',
})

# Runtime keys that the Runner reads only as a default for a key inside
# another one: ``data_preprocessor`` goes into ``model`` only if ``model``
# has none (``model.setdefault``).
DEFAULT_ONLY_KEYS = {'data_preprocessor': ('model', 'data_preprocessor')}

# Checkpoint prefixes that mmengine resolves through torchvision's model zoo.
TORCHVISION_PREFIXES = ('torchvision://', 'modelzoo://')

Path = Tuple


def _dotted(path: Path) -> str:
    return '.'.join(str(p) for p in path)


def _children(node) -> Iterator[Tuple[object, object]]:
    if isinstance(node, dict):
        yield from node.items()
    elif isinstance(node, (list, tuple)):
        yield from enumerate(node)


def _walk(node, path: Path = ()) -> Iterator[Tuple[Path, object]]:
    """``(path, value)`` for every value under ``node``, depth first."""
    for key, value in _children(node):
        yield path + (key, ), value
        yield from _walk(value, path + (key, ))


def _resolve(node, path: Path):
    """The value at ``path`` under ``node``; KeyError if there is none."""
    for key in path:
        if isinstance(node, dict):
            node = node[key]
        elif isinstance(node, (list, tuple)):
            if not isinstance(key, int) or not -len(node) <= key < len(node):
                raise KeyError(key)
            node = node[key]
        else:
            raise KeyError(key)
    return node


def _split_key(key: str) -> Path:
    """``'a.0.b'`` -> ``('a', 0, 'b')`` (list indices as ints, as
    ``Config.merge_from_dict`` reads them)."""
    return tuple(int(p) if p.isdigit() else p for p in key.split('.'))


def _runtime_items(cfg: dict) -> Iterator[Tuple[Path, object]]:
    for top in cfg:
        if top in RUNTIME_KEYS:
            yield (top, ), cfg[top]
            yield from _walk(cfg[top], (top, ))


def _copies(cfg: dict, name: str, rest: Path) -> List[str]:
    """Keys read at run time that ``name.rest`` most likely means: the
    places ``cfg[name]`` was copied to (equal containers, or keys of the
    same name), with ``rest`` appended; those where ``rest`` exists first."""
    value = cfg.get(name, None)
    same_container = isinstance(value, (dict, list, tuple)) and len(value)
    found = [
        path for path, other in _runtime_items(cfg)
        if path[-1] == name or (same_container and other == value)
    ]

    def has_rest(path):
        try:
            _resolve(_resolve(cfg, path), rest)
            return True
        except KeyError:
            return False

    found.sort(key=lambda path: (not has_rest(path), len(path)))
    return [_dotted(path + rest) for path in found]


def _bullets(keys: List[str], limit: int = 6) -> str:
    shown = '\n'.join(f'  {key}' for key in keys[:limit])
    if len(keys) > limit:
        shown += f'\n  ... and {len(keys) - limit} more'
    return shown


def check_cfg_options(cfg, options: Optional[Dict[str, object]],
                      set_by_command_line: Optional[Dict[str, str]] = None):
    """Raise ValueError for a ``--cfg-options`` key that would set nothing.

    ``cfg`` is the config as parsed, before ``options`` (``key: value`` as
    ``DictAction`` gives them) are merged. A key sets nothing when its
    top-level name is a variable of the config file (not in
    :data:`RUNTIME_KEYS`: its value was copied elsewhere at parse time), is
    neither in the config nor read at run time, only provides a default
    that the config already overrides (:data:`DEFAULT_ONLY_KEYS`), or is set
    again afterwards by the tool's own arguments (``set_by_command_line``:
    key -> the argument that sets it). The message names the keys to use
    instead.
    """
    if not options:
        return
    cfg = cfg.to_dict()
    set_by_command_line = set_by_command_line or {}
    problems = []
    for key in options:
        path = _split_key(key)
        top, rest = path[0], path[1:]
        if top in set_by_command_line:
            problems.append(
                f'{key}: `{top}` is set by {set_by_command_line[top]} of '
                'this command, after the config options; use that instead.')
            continue
        if top in DEFAULT_ONLY_KEYS:
            owner = DEFAULT_ONLY_KEYS[top]
            try:
                _resolve(cfg, owner)
            except KeyError:
                continue
            problems.append(
                f'{key}: `{top}` is only a default for `{_dotted(owner)}`, '
                'which this config sets; use\n' +
                _bullets([_dotted(owner + rest)]))
            continue
        if top in RUNTIME_KEYS:
            continue
        if top in cfg:
            places = _copies(cfg, top, rest)
            message = (f'{key}: `{top}` is a variable of the config file, '
                       'read only while the file is parsed (its value was '
                       'copied into other keys then), so overriding it '
                       'changes nothing.')
            if places:
                message += ' Set the keys that hold its value:\n' + \
                    _bullets(places)
            else:
                message += (' Override the keys computed from it instead, '
                            'or set it in a config file that inherits '
                            'this one.')
            problems.append(message)
            continue
        places = [] if rest else [
            _dotted(p) for p, _ in _runtime_items(cfg) if p[-1] == top
        ]
        places += difflib.get_close_matches(str(top),
                                            sorted(RUNTIME_KEYS | set(cfg)),
                                            n=3)
        message = (f'{key}: `{top}` is not a key of this config and '
                   'nothing reads it.')
        if places:
            message += ' Did you mean:\n' + _bullets(places)
        problems.append(message)
    if problems:
        note = ''
        if any('nothing reads it' in p for p in problems):
            note = ('\n(A top-level key that code of your own reads from '
                    'runner.cfg: set it in a config file.)')
        raise ValueError('--cfg-options: ' + '\n'.join(problems) + note)


def import_option_modules(cfg, options: Optional[Dict[str, object]]):
    """Import ``custom_imports`` given as ``--cfg-options``: the config file
    imported its own while it was parsed, before the options were merged."""
    if options and any(
            _split_key(key)[0] == 'custom_imports' for key in options):
        from mmengine.utils import import_modules_from_strings
        import_modules_from_strings(**cfg.custom_imports)


def _torchvision_problem() -> Optional[str]:
    """None if torchvision imports, else why not."""
    try:
        importlib.import_module('torchvision')
    except Exception as exc:  # missing, or built for another torch
        return f'{type(exc).__name__}: {exc}'
    return None


def matching_torchvision(torch_version: str) -> Optional[str]:
    """The torchvision release built for a torch 2.x release (torch 2.m.p
    pairs with torchvision 0.(m+15).p), or None for other torch majors."""
    parts = torch_version.split('+')[0].split('.')
    if len(parts) < 3 or parts[0] != '2' or not parts[1].isdigit():
        return None
    patch = ''.join(c for c in parts[2] if c.isdigit()) or '0'
    return f'0.{int(parts[1]) + 15}.{patch}'


def check_weight_sources(cfg):
    """Raise RuntimeError before training when the config loads weights
    through torchvision's model zoo (``torchvision://``, ``modelzoo://``:
    stock ResNet ``init_cfg`` and ``load_from``) and torchvision does not
    import; the message names the keys and the ways on."""
    uses = [
        (path, value) for path, value in _runtime_items(cfg.to_dict())
        if isinstance(value, str) and value.startswith(TORCHVISION_PREFIXES)
    ]
    if not uses:
        return
    problem = _torchvision_problem()
    if problem is None:
        return
    import torch
    release = matching_torchvision(torch.__version__)
    install = (f'pip install --no-deps torchvision=={release}'
               if release else 'pip install --no-deps torchvision')
    keys = _bullets([f'{_dotted(path)} = {value!r}' for path, value in uses])
    owners = []
    for path, _ in uses:
        owner = path[:-1] if path[-1] == 'checkpoint' else path
        if _dotted(owner) not in owners:
            owners.append(_dotted(owner))
    raise RuntimeError(
        f'This config loads weights through torchvision:\n{keys}\n'
        f'but torchvision does not import ({problem}). Either\n'
        f'  - install the torchvision built for torch {torch.__version__}: '
        f'`{install}` (PyPI\'s Linux wheels match PyPI\'s torch; for a '
        '+cpu torch use PyTorch\'s CPU index, '
        '--index-url https://download.pytorch.org/whl/cpu), or\n'
        '  - train from random weights: --cfg-options ' +
        ' '.join(f'{owner}=None' for owner in owners) + ', or\n'
        '  - load a local copy of the weights: --cfg-options ' +
        ' '.join(f'{_dotted(path)}=PATH' for path, _ in uses) + '.')
