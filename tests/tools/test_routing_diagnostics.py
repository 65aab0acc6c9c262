"""tools/analysis/routing_diagnostics.py on a reduced HGWCaps UNet."""
import math

import pytest
import torch

from mmhgw.analysis.plans import distance_at_plan
from mmhgw.config_utils import load_offline_config
from tools.analysis.routing_diagnostics import (diagnose, distance_agreement,
                                                input_dependence, part_offsets,
                                                plan_input_dependence)


@pytest.fixture
def cfg(reduced_seg_config, tmp_path):
    return load_offline_config(
        str(reduced_seg_config(tmp_path, num_train=4, num_val=1)))


@pytest.mark.parametrize('scope', ['layer', 'network'])
def test_statistics_and_where_e_reaches(cfg, scope):
    cfg.model.backbone.hgw_cfg.reg_scope = scope
    result = diagnose(cfg, batches=1, beta=0.5)
    assert len(result['layers']) == 4  # deepest encoder and decoder blocks
    for s in result['layers'].values():
        assert 0 <= s['row_entropy'] <= 1
        assert 0 < s['active_types'] <= s['out_types']
        assert 0 <= s['saturated_cross_cost'] <= 1
        assert s['regulariser'] > 0
        assert s['distance_std_locations'] > 0
        assert s['distance_std_types'] > 0
        assert 0 <= s['activation_std_locations'] <= 1
        assert -1 <= s['uniform_correlation'] <= 1
        assert 0 <= s['uniform_same_best_type'] <= 1
        assert 0 <= s['uniform_activation_change'] <= 1
        assert s['plan_part_offset'] > 0
        assert 'offset_pose_share' not in s
        assert 0 < s['assignment_stability'] <= 1
        assert -1 <= s['mean_plan_correlation'] <= 1
        assert 0 <= s['mean_plan_same_best_type'] <= 1
    grads = result['gradients']
    # E trains the component embedding and the subcapsules; a layer's pose
    # map only as an input of a later layer's E (scope 'network').
    for role in ('embed', 'subcapsules'):
        caps = grads[f'capsule layers ({role})']
        assert caps['task + E'] != pytest.approx(caps['task'])
    pose = grads['capsule layers (pose_weight)']
    assert pose['task'] > 0
    if scope == 'layer':
        assert pose['task + E'] == pytest.approx(pose['task'], rel=1e-5)
    else:
        assert pose['task + E'] != pytest.approx(pose['task'], rel=1e-3)
    # The first encoder stage lies before every capsule layer: E reaches
    # it only through the layers' inputs.
    first = grads['backbone (encoder.0)']
    if scope == 'layer':
        assert first['task + E'] == pytest.approx(first['task'], rel=1e-5)
    else:
        assert first['task + E'] != pytest.approx(first['task'], rel=1e-3)


def test_input_dependence_by_hand():
    # Two images, three locations, two types: type 0 changes with the
    # location, type 1 does not.
    dist = torch.tensor([[[0., 1.], [2., 1.], [4., 1.]],
                         [[1., 5.], [1., 5.], [1., 5.]]])
    act = torch.exp(-(dist - dist.min(-1, keepdim=True)[0]))
    out = input_dependence(dist, act)
    # Over locations: std of (0, 2, 4) is 2, all others 0.
    assert out['distance_std_locations'] == pytest.approx(2 / 4)
    # Over types at each location: |d0 - d1| / sqrt(2).
    gaps = torch.tensor([1., 1., 3., 4., 4., 4.])
    assert out['distance_std_types'] == pytest.approx(
        (gaps / 2**0.5).mean().item())
    assert out['activation_std_locations'] == pytest.approx(
        act.std(1).mean().item())


def test_distance_agreement_by_hand():
    dist = torch.tensor([[[0., 1., 2.], [2., 1., 0.]]])
    # A shift per location and a scale change nothing the activations
    # compare across types: correlation 1, the same best types.
    same = distance_agreement('uniform', dist,
                              3 * dist + torch.tensor([[[5.], [-1.]]]), 1.0)
    assert same['uniform_correlation'] == pytest.approx(1.0)
    assert same['uniform_same_best_type'] == 1.0
    # Reversed order of the types: correlation -1, no best type shared;
    # activations exp(-(0, 1, 2)) against exp(-(2, 1, 0)).
    flipped = distance_agreement('mean_plan', dist, dist.flip(-1), 1.0)
    assert flipped['mean_plan_correlation'] == pytest.approx(-1.0)
    assert flipped['mean_plan_same_best_type'] == 0.0
    change = 2 * (1 - math.exp(-2)) / 3
    assert flipped['mean_plan_activation_change'] == pytest.approx(change)


def test_route_with_another_routing_is_that_routing():
    from mmhgw.models import HGWCaps
    torch.manual_seed(0)
    layer = HGWCaps(16, 16, 3, padding=1, in_types=4, out_types=4, num_parts=3,
                    part_dim=4).eval()
    uniform = HGWCaps(16, 16, 3, padding=1, in_types=4, out_types=4,
                      num_parts=3, part_dim=4, routing='uniform').eval()
    uniform.load_state_dict(layer.state_dict())
    x = torch.randn(1, 16, 5, 6)
    with torch.no_grad():
        torch.testing.assert_close(
            layer.route(x, routing='uniform')['distance'],
            uniform.route(x)['distance'])
        assert not torch.allclose(
            layer.route(x)['distance'],
            uniform.route(x)['distance'])
    with pytest.raises(ValueError, match='routing must be one of'):
        layer.route(x, routing='plan')


def test_part_offsets_by_hand():
    """The plan's parts against the components' mean: none under the
    uniform plan; under a hard plan each part is the component sent to it;
    the offsets' pose of a mean_plus_plan layer is 0 while its map is 0."""
    from mmhgw.models import HGWCaps
    torch.manual_seed(0)
    layer = HGWCaps(4, 4, 3, padding=1, in_types=2, out_types=1, num_parts=2,
                    part_dim=2, pose_from='mean_plus_plan')
    X_p = torch.tensor([[[[1., 0.], [3., 0.]]]])  # [B, L, V_p, d], mean (2, 0)
    uniform = torch.full((1, 1, 1, 2, 2), 0.25)
    still = part_offsets(layer, X_p, uniform)
    assert still == {'plan_part_offset': 0.0, 'offset_pose_share': 0.0}
    # Component i to part i: parts (1, 0) and (3, 0), offsets -1 and +1
    # about the mean: norm sqrt(2) against the mean's 2 sqrt(2).
    hard = torch.tensor([[0.5, 0.], [0., 0.5]]).view(1, 1, 1, 2, 2)
    moved = part_offsets(layer, X_p, hard)
    assert moved['plan_part_offset'] == pytest.approx(0.5)
    assert moved['offset_pose_share'] == 0.0
    with torch.no_grad():
        layer.plan_pose_weight.copy_(layer.pose_weight)
    assert part_offsets(layer, X_p, hard)['offset_pose_share'] > 0


def test_part_offsets_of_both_offset_poses():
    # Each source's share is that of the layer adding it alone with the
    # same map; the total is that of the two poses' sum.
    both = _small_layer(pose_from='mean_plus_components_plus_plan')
    plus = _small_layer(pose_from='mean_plus_plan')
    comps = _small_layer(pose_from='mean_plus_components')
    with torch.no_grad():
        for layer in (both, plus):
            layer.plan_pose_weight.copy_(layer.pose_weight)
        for layer in (both, comps):
            layer.component_pose_weight.normal_(
                generator=torch.Generator().manual_seed(1))
        X_p = torch.randn(2, 5, 4, 4)
        plan = torch.softmax(torch.randn(2, 5, 4, 4, 3).flatten(-2),
                             -1).view(2, 5, 4, 4, 3)
        got = part_offsets(both, X_p, plan)
    assert got['plan_offset_pose_share'] == pytest.approx(
        part_offsets(plus, X_p, plan)['offset_pose_share'])
    assert got['component_offset_pose_share'] == pytest.approx(
        part_offsets(comps, X_p, plan)['offset_pose_share'])
    assert 0 < got['offset_pose_share'] <= (got['plan_offset_pose_share'] +
                                            got['component_offset_pose_share'])


def _small_layer(**kwargs):
    from mmhgw.models import HGWCaps
    torch.manual_seed(0)
    return HGWCaps(16, 16, 3, padding=1, in_types=4, out_types=4, num_parts=3,
                   part_dim=4, **kwargs).eval()


def test_plan_input_dependence_by_hand():
    layer = _small_layer()
    x = torch.randn(1, 16, 3, 3)
    with torch.no_grad():
        dist = layer.route(x, routing='uniform')['distance']
    B, L, N, V_p, V_q = 1, 9, 4, 4, 3
    # One hard grouping at every location: fully stable, and the mean plan
    # is that plan, so its distances are the routed ones.
    fixed = torch.zeros(V_p, V_q)
    fixed[torch.arange(V_p), torch.tensor([0, 1, 2, 0])] = 1 / V_p
    plans = fixed.expand(B, L, N, V_p, V_q)
    with torch.no_grad():
        routed = distance_at_plan(layer, x, plans)
        out = plan_input_dependence(layer, x, routed, plans)
    assert out['assignment_stability'] == 1.0
    assert out['mean_plan_correlation'] == pytest.approx(1.0)
    assert out['mean_plan_same_best_type'] == 1.0
    # Component 0 goes to part 1 instead at 3 of the 9 locations: 3 of the
    # 9 x 4 x 4 (location, type, component) entries leave the mode.
    moved = plans.clone()
    moved[:, :3, :, 0] = fixed[[1]]
    with torch.no_grad():
        out = plan_input_dependence(layer, x, dist, moved)
    assert out['assignment_stability'] == pytest.approx(1 - 3 * 4 / (9 * 16))


@pytest.mark.parametrize('argv, message', [
    (['--batches', '0'], '--batches must be >= 1, got 0'),
    (['--beta', '1.5'], '--beta must be in [0, 1]'),
    (['--beta', 'nan'], '--beta must be in [0, 1]'),
    (['--checkpoint', 'nope.pth'], '--checkpoint nope.pth not found'),
])
def test_bad_arguments_are_refused_naming_them(argv, message, capsys):
    """A run that would diagnose nothing, with a beta no layer takes, or
    without its checkpoint ends before the model is built."""
    from tools.analysis.routing_diagnostics import parse_args
    with pytest.raises(SystemExit) as err:
        parse_args(['config.py', *argv])
    assert err.value.code == 2
    assert message in capsys.readouterr().err
