"""Arguments of :class:`~mmhgw.models.layers.HGWCaps`: the solver config
(``solver_cfg``, filled with defaults as mmdet fills ``norm_cfg``), the
checks of the layer's own arguments and of checkpoint values, and the
spellings of the previous release (``eps=``, ``outer_iters=``,
``inner_iters=``, ``grad=``, ``solver_regularizer=``, ``ablation=``), still
taken with a DeprecationWarning naming the new one."""
import warnings
from typing import Optional, Tuple

import torch

from mmhgw.arg_checks import (AT_LEAST_0, POSITIVE, UNIT, check_choice,
                              check_int, check_number, check_unit)
from mmhgw.ot import check_solver_options

#: The solver of every HGWCaps layer unless ``solver_cfg`` says otherwise:
#: the proximal step eps and the fewest iterations at which the routing
#: plan is near the converged one (why these: README, "What the plan is,
#: and is not"; a third step scores no better, docs/evidence.md).
SOLVER_DEFAULTS = dict(eps=1e-2, outer_iters=2, inner_iters=10,
                       grad='envelope', regularizer='proximal')

#: The previous release's solver arguments -> their key in ``solver_cfg``.
LEGACY_SOLVER_KEYS = dict(eps='eps', outer_iters='outer_iters',
                          inner_iters='inner_iters', grad='grad',
                          solver_regularizer='regularizer')

#: The previous release's ``ablation=`` -> the knobs that now express it.
ABLATIONS = {
    'A': "solver_cfg=dict(regularizer='entropic')",
    'B': 'reg_weight=0',
    'C': 'use_observed=False',
}

OBSERVED = ('coactivation', 'counts')
REG_SCOPES = ('network', 'layer')
#: The padding modes of ``nn.Conv2d``, which the embedding convolution takes.
PADDING_MODES = ('zeros', 'reflect', 'replicate', 'circular')


def _deprecated(old: str, new: str):
    warnings.warn(
        f'HGWCaps({old}) is deprecated and will be removed in the next '
        f'release; use {new}', DeprecationWarning, stacklevel=4)


def resolve_legacy(solver_cfg: Optional[dict], reg_weight: float,
                   use_observed: bool,
                   legacy: dict) -> Tuple[dict, float, bool]:
    """``(solver_cfg, reg_weight, use_observed)`` with the previous
    release's keyword arguments ``legacy`` folded in, each with a
    DeprecationWarning naming the new spelling: ``eps``, ``outer_iters``,
    ``inner_iters``, ``grad`` and ``solver_regularizer`` are keys of
    ``solver_cfg`` (the last as ``regularizer``); ``ablation`` 'A', 'B'
    and 'C' are ``solver_cfg=dict(regularizer='entropic')``,
    ``reg_weight=0`` and ``use_observed=False``. Other keywords raise a
    TypeError naming them, and a value given both ways a ValueError."""
    unknown = sorted(set(legacy) - set(LEGACY_SOLVER_KEYS) - {'ablation'})
    if unknown:
        raise TypeError(f'HGWCaps got unexpected keyword arguments '
                        f'{unknown}')
    solver_cfg = dict(solver_cfg or {})
    for old, key in LEGACY_SOLVER_KEYS.items():
        if old not in legacy:
            continue
        if key in solver_cfg:
            raise ValueError(f'HGWCaps got both {old}= and '
                             f'solver_cfg[{key!r}]; give only solver_cfg')
        _deprecated(f'{old}=...', f'solver_cfg=dict({key}=...)')
        solver_cfg[key] = legacy[old]
    ablation = legacy.get('ablation')
    if ablation is None:
        return solver_cfg, reg_weight, use_observed
    check_choice('ablation', ablation, (None, ) + tuple(ABLATIONS))
    _deprecated(f'ablation={ablation!r}', ABLATIONS[ablation])
    if ablation == 'A':
        if solver_cfg.get('regularizer', 'entropic') != 'entropic':
            raise ValueError(
                f"ablation='A' is the entropic regulariser, but the solver's "
                f"regularizer is {solver_cfg['regularizer']!r}")
        solver_cfg['regularizer'] = 'entropic'
    elif ablation == 'B':
        reg_weight = 0.0
    else:
        use_observed = False
    return solver_cfg, reg_weight, use_observed


def build_solver_cfg(solver_cfg: dict) -> dict:
    """:data:`SOLVER_DEFAULTS` updated by ``solver_cfg``; unknown keys and
    invalid values raise a ValueError naming them."""
    unknown = sorted(set(solver_cfg) - set(SOLVER_DEFAULTS))
    if unknown:
        raise ValueError(f'HGWCaps solver_cfg has unknown keys {unknown}; '
                         f'the keys are {sorted(SOLVER_DEFAULTS)}')
    cfg = dict(SOLVER_DEFAULTS, **solver_cfg)
    try:
        check_solver_options(**cfg)
    except ValueError as err:
        raise ValueError(f'HGWCaps solver_cfg: {err}') from None
    return cfg


#: What a component is (``HGWCaps(components=...)``).
COMPONENTS = ('types', 'positions')

#: What the pose map reads (``HGWCaps(pose_from=...)``).
POSE_SOURCES = ('plan', 'mean', 'mean_plus_plan', 'mean_plus_components',
                'mean_plus_components_plus_plan')


def check_layer_args(in_channels, out_channels, groups, padding_mode, in_types,
                     out_types, num_parts, part_dim, beta, reg_weight, routing,
                     routings, use_observed, observed, temperature, reg_scope,
                     backend, backends, pose_from, align_weight,
                     align_temperature, subcapsule_std, pose_gain, components,
                     conv_cfg, component_norm):
    """Raise a ValueError naming the first invalid argument of the layer."""
    for name, value in (('in_types', in_types), ('out_types', out_types),
                        ('num_parts', num_parts), ('part_dim', part_dim)):
        check_int(name, value)
    if groups != 1:
        raise ValueError(f'groups must be 1 for HGWCaps (capsule types '
                         f'replace channel groups), got {groups}')
    for name, total, types in (('in_channels', in_channels, in_types),
                               ('out_channels', out_channels, out_types)):
        if total % types:
            raise ValueError(f'{name}={total} must be divisible by '
                             f'{name.split("_")[0]}_types={types}')
    for name, value, allowed in (('padding_mode', padding_mode, PADDING_MODES),
                                 ('routing', routing, routings),
                                 ('reg_scope', reg_scope, REG_SCOPES),
                                 ('observed', observed,
                                  OBSERVED), ('backend', backend, backends),
                                 ('pose_from', pose_from, POSE_SOURCES),
                                 ('components', components, COMPONENTS)):
        check_choice(name, value, allowed)
    if components == 'positions':
        if observed == 'counts' and use_observed is True:
            raise ValueError(
                "observed='counts' counts the input types of the patch and "
                "needs components='types', got components='positions'")
        if conv_cfg is not None:
            raise ValueError(
                f"components='positions' embeds by its own map and takes no "
                f"conv_cfg (it must be None), got conv_cfg={conv_cfg!r}")
    for name, value in (('use_observed', use_observed), ('component_norm',
                                                         component_norm)):
        if not isinstance(value, bool):
            raise ValueError(f'{name} must be True or False, got {value!r}')
    checked = [('beta', beta, UNIT), ('reg_weight', reg_weight, AT_LEAST_0),
               ('temperature', temperature, POSITIVE),
               ('align_weight', align_weight, AT_LEAST_0),
               ('subcapsule_std', subcapsule_std, POSITIVE),
               ('pose_gain', pose_gain, POSITIVE)]
    if align_temperature is not None:  # None: the activation's
        checked.append(('align_temperature', align_temperature, POSITIVE))
    for name, value, bounds in checked:
        check_number(name, value, bounds)


def check_checkpoint_beta(state_dict: dict, key: str):
    """Refuse a checkpoint whose ``beta`` (at ``key``) is outside [0, 1]:
    it would make every output NaN."""
    beta = state_dict.get(key)
    if not torch.is_tensor(beta):
        return  # missing: the loader names it
    for value in beta.flatten().tolist():
        try:
            check_unit(f'checkpoint key {key!r}', value)
        except ValueError as err:
            raise ValueError(f"{err}: the capsule layer's beta; the "
                             f'checkpoint is corrupt or not of this '
                             f'layer') from None
