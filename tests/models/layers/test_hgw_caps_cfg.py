"""HGWCaps' argument surface: solver_cfg, use_observed, the previous
release's spellings (deprecated), checkpoint keys, and the public routing
inputs."""
import warnings

import pytest
import torch

import mmhgw  # noqa: F401
from mmhgw.models import HGWCaps
from mmhgw.models.layers.hgw_caps_args import SOLVER_DEFAULTS
from mmhgw.ops import hgw_routing

SMALL = dict(in_types=4, out_types=4, num_parts=3, part_dim=4)


def small_caps(**kwargs):
    torch.manual_seed(0)
    return HGWCaps(16, 8, 3, padding=1, **dict(SMALL, **kwargs))


def test_solver_cfg_is_filled_with_the_defaults():
    caps = small_caps(solver_cfg=dict(eps=1e-3, inner_iters=4))
    assert caps.solver_cfg == dict(SOLVER_DEFAULTS, eps=1e-3, inner_iters=4)
    assert small_caps().solver_cfg == SOLVER_DEFAULTS


def test_repr_shows_the_training_terms():
    # A model's printout is how a user checks what a config built.
    text = repr(small_caps(reg_weight=2.5, reg_scope='layer',
                           align_weight=1.0))
    assert 'reg_weight=2.5, reg_scope=layer, align_weight=1.0' in text
    assert 'reg_scope=network, align_weight=0.0' in repr(small_caps())


@pytest.mark.parametrize('solver_cfg,match', [
    (dict(epsilon=1e-2, tol=1), r"unknown keys \['epsilon', 'tol'\]"),
    (dict(outer_iters=0), 'solver_cfg: outer_iters must be an int >= 1'),
    (dict(regularizer='sinkhorn'), 'solver_cfg: regularizer must be one'),
    (dict(grad='implicit'), 'solver_cfg: grad must be one of'),
])
def test_bad_solver_cfg_is_refused_naming_the_key(solver_cfg, match):
    with pytest.raises(ValueError, match=match):
        small_caps(solver_cfg=solver_cfg)


@pytest.mark.parametrize('old,new,spelling', [
    (dict(eps=1e-3), dict(solver_cfg=dict(eps=1e-3)),
     r'solver_cfg=dict\(eps=...\)'),
    (dict(outer_iters=2), dict(solver_cfg=dict(outer_iters=2)),
     r'solver_cfg=dict\(outer_iters=...\)'),
    (dict(inner_iters=4), dict(solver_cfg=dict(inner_iters=4)),
     r'solver_cfg=dict\(inner_iters=...\)'),
    (dict(grad='unroll'), dict(solver_cfg=dict(grad='unroll')),
     r'solver_cfg=dict\(grad=...\)'),
    (dict(solver_regularizer='entropic'),
     dict(solver_cfg=dict(regularizer='entropic')),
     r'solver_cfg=dict\(regularizer=...\)'),
    (dict(ablation='A'), dict(solver_cfg=dict(regularizer='entropic')),
     r"solver_cfg=dict\(regularizer='entropic'\)"),
    (dict(ablation='B'), dict(reg_weight=0), 'reg_weight=0'),
    (dict(ablation='C'), dict(use_observed=False), 'use_observed=False'),
])
def test_old_arguments_warn_and_build_the_new_spelling(old, new, spelling):
    with pytest.warns(DeprecationWarning, match=spelling):
        legacy = small_caps(**old).train()
    with warnings.catch_warnings():
        warnings.simplefilter('error', DeprecationWarning)
        current = small_caps(**new).train()
    for key in ('solver_cfg', 'reg_weight', 'use_observed'):
        assert getattr(legacy, key) == getattr(current, key), key
    x = torch.randn(2, 16, 5, 4)
    for a, b in zip(legacy.forward_terms(x), current.forward_terms(x)):
        if a is None:
            assert b is None
        else:
            torch.testing.assert_close(a, b, rtol=0, atol=0)


@pytest.mark.parametrize('kwargs,error,match', [
    (dict(eps=1e-3, solver_cfg=dict(eps=1e-2)), ValueError,
     r"both eps= and solver_cfg\['eps'\]"),
    (dict(ablation='A', solver_regularizer='proximal'), ValueError,
     "ablation='A' is the entropic regulariser"),
    (dict(ablation='D'), ValueError, 'ablation must be one of'),
    (dict(epz=1e-3), TypeError, r"\['epz'\]"),
    (dict(use_observed=0), ValueError, 'use_observed must be True or'),
])
def test_conflicting_or_unknown_arguments_are_named(kwargs, error, match):
    with warnings.catch_warnings():
        warnings.simplefilter('ignore', DeprecationWarning)
        with pytest.raises(error, match=match):
            small_caps(**kwargs)


def test_checkpoint_keys_of_the_previous_release_load():
    """The state-dict keys and shapes of the previous release's layer
    (none were renamed): such a checkpoint loads strictly and gives the
    layer it was saved from."""
    caps = small_caps(bias=True).eval()
    old_keys = {  # in_types * part_dim, in_channels / in_types, k, k
        'beta': (), 'embed.weight': (16, 4, 3, 3), 'subcapsules': (4, 3, 4),
        'pose_weight': (4, 12, 2), 'bias': (8, )
    }
    state = caps.state_dict()
    assert {k: tuple(v.shape) for k, v in state.items()} == old_keys
    torch.manual_seed(1)
    fresh = HGWCaps(16, 8, 3, padding=1, bias=True, **SMALL).eval()
    fresh.load_state_dict({k: v.clone() for k, v in state.items()})
    x = torch.randn(1, 16, 5, 5)
    with torch.no_grad():
        torch.testing.assert_close(fresh(x), caps(x), rtol=0, atol=0)


@pytest.mark.parametrize('observed', ['coactivation', 'counts'])
def test_routing_inputs_route_as_the_layer(observed):
    caps = small_caps(observed=observed).eval()
    x = torch.randn(2, 16, 5, 4)
    with torch.no_grad():
        inputs = caps.routing_inputs(x)
        dist, parts = hgw_routing(*inputs, **caps.routing_options())
        _, _, layer_dist = caps.forward_terms(x)
        route = caps.route(x)
    assert inputs.X_p.shape == (2, 20, 4, 4)
    assert inputs.factors.h1.shape == (2, 20, 4, 4)
    assert inputs.factors.col.shape == (4, 3)
    torch.testing.assert_close(dist, layer_dist)
    assert parts.shape == (2, 20, 4, 3, 4)
    torch.testing.assert_close(route['distance'], dist, rtol=1e-5, atol=1e-6)
    assert route['cross_cost'].shape == (2, 20, 4, 4, 3)


def test_route_reports_the_regulariser_of_training():
    caps = small_caps().train()
    x = torch.randn(2, 16, 5, 4)
    _, reg, _ = caps.forward_terms(x)
    torch.testing.assert_close(caps.route(x)['regulariser'], reg)
