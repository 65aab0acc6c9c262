"""Checking a config's ``type`` names before a Runner is built.

A misspelt ``type`` surfaces deep inside a build, far from the config and
sometimes without the name (mmcv's ``build_conv_layer`` says ``Cannot find
None in registry``). :func:`check_registry_types` walks the config and
refuses, naming the key and the closest registered names, every ``type``
that no registry the build could search holds.
"""
import difflib
import importlib
from typing import Iterable, List, Optional, Set, Tuple

from mmengine.registry import Registry


class ConfigTypeError(KeyError):
    """A config ``type`` that names nothing registered."""

    def __str__(self):  # KeyError would show the message quoted
        return str(self.args[0])


def _root_registries() -> List[Registry]:
    import mmengine.registry as root
    return [r for r in vars(root).values() if isinstance(r, Registry)]


def _scope_registries(scope: str) -> List[Registry]:
    """The registries of ``scope`` (children of mmengine's roots), their
    modules imported as a build would import them; [] for an unknown
    scope."""
    try:
        importlib.import_module(f'{scope}.registry')
    except ImportError:
        return []
    found = []
    for root in _root_registries():
        child = root._children.get(scope)
        if child is not None:
            found.append(child)
    return found


def _names(registries: Iterable[Registry]) -> Set[str]:
    names = set()
    for registry in registries:
        registry.import_from_location()
        names.update(registry.module_dict)
    return names


class _Scopes:
    """Registered names per scope, gathered once."""

    def __init__(self):
        roots = _root_registries()
        self.root = _names(roots)
        self._cache = {}

    def names(self, scope: Optional[str]) -> Optional[Set[str]]:
        """What a build in ``scope`` finds (its registries and mmengine's
        roots); None for a scope that is not installed."""
        if scope is None or scope == 'mmengine':
            return self.root
        if scope not in self._cache:
            registries = _scope_registries(scope)
            self._cache[scope] = (self.root
                                  | _names(registries) if registries else None)
        return self._cache[scope]


def _resolves_otherwise(name: str) -> bool:
    """Whether ``name`` is found without a registry: a dotted import path
    (as mmengine's ``Registry.get`` accepts) or an mmcv op that mmdet looks
    up by name (``nms``, ``RoIAlign``)."""
    if '.' in name:
        from mmengine.utils import get_object_from_string
        try:
            return get_object_from_string(name) is not None
        except Exception:  # noqa: BLE001
            return False
    try:
        from mmcv import ops
    except ImportError:
        return False
    return hasattr(ops, name)


def _walk(node, path: str, scope: Optional[str]):
    """``(key path, type name, scope)`` of every string ``type`` under
    ``node``."""
    if isinstance(node, dict):
        scope = node.get('_scope_', scope)
        kind = node.get('type')
        if isinstance(kind, str):
            yield f'{path}.type' if path else 'type', kind, scope
        for key, value in node.items():
            if key != 'type':
                yield from _walk(value, f'{path}.{key}' if path else key,
                                 scope)
    elif isinstance(node, (list, tuple)):
        for i, value in enumerate(node):
            yield from _walk(value, f'{path}[{i}]', scope)


def unknown_types(cfg) -> List[Tuple[str, str, List[str]]]:
    """``(key path, type name, close registered names)`` of every ``type``
    in ``cfg`` that the build would not find."""
    scopes = _Scopes()
    default = cfg.get('default_scope')
    bad = []
    for path, name, scope in _walk(cfg.to_dict(), '', default):
        prefix, dot, rest = name.partition('.')
        if dot and scopes.names(prefix) is not None:
            scope, name_in_scope = prefix, rest  # 'mmdet.ResNet'
        else:
            name_in_scope = name
        known = scopes.names(scope) or scopes.root
        if name_in_scope in known or _resolves_otherwise(name):
            continue
        bad.append((path, name,
                    difflib.get_close_matches(name_in_scope, known, n=3,
                                              cutoff=0.6)))
    return bad


def check_registry_types(cfg, source: Optional[str] = None):
    """Raise :class:`ConfigTypeError` naming every ``type`` of ``cfg``
    that is registered nowhere a build could look (``default_scope``, a
    ``_scope_`` key, a ``'scope.Name'`` prefix, mmengine's roots).

    Args:
        cfg: an mmengine ``Config`` (custom imports already done, as
            ``Config.fromfile`` does).
        source: the config file, for the message (``cfg.filename`` if
            None).
    """
    bad = unknown_types(cfg)
    if not bad:
        return
    source = source or getattr(cfg, 'filename', None) or 'the config'
    scope = cfg.get('default_scope') or 'mmengine'
    lines = []
    for path, name, close in bad:
        hint = f' (did you mean {" or ".join(map(repr, close))}?)' \
            if close else ''
        lines.append(f'{path} = {name!r}{hint}')
    raise ConfigTypeError(
        f'{source}: unknown type name{"s" if len(bad) > 1 else ""}, '
        f'registered nowhere in scope {scope!r} or mmengine: ' +
        '; '.join(lines))
