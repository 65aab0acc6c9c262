"""mmhgw.analysis.plans: capsule layers at a given plan."""
import pytest
import torch

from mmhgw.analysis.plans import distance_at_plan, mean_plans, route_at_plan
from mmhgw.config_utils import build_config_model, load_offline_config
from mmhgw.models import HGWCaps


def small_layer(**kwargs):
    torch.manual_seed(0)
    return HGWCaps(16, 16, 3, padding=1, in_types=4, out_types=4, num_parts=3,
                   part_dim=4, **kwargs).eval()


def test_distance_at_plan_is_the_distance_at_that_plan():
    """At the solved plans the value is the layer's own distance; at the
    uniform plan p q^T, the uniform routing's."""
    layer = small_layer()
    x = torch.randn(2, 16, 4, 5)
    with torch.no_grad():
        r = layer.route(x)
        torch.testing.assert_close(distance_at_plan(layer, x, r['plan']),
                                   r['distance'])
        uniform = torch.full((4, 4, 3), 1 / 12)
        torch.testing.assert_close(
            distance_at_plan(layer, x, uniform),
            layer.route(x, routing='uniform')['distance'])


@pytest.mark.parametrize('kwargs', [
    dict(),
    dict(pose_from='mean_plus_components'),
    dict(pose_from='mean_plus_components', components='positions'),
])
def test_routed_at_the_uniform_plan_is_uniform_routing(kwargs):
    layer = small_layer(**kwargs)
    if 'component_pose_weight' in dict(layer.named_parameters()):
        torch.nn.init.normal_(layer.component_pose_weight)
    uniform = small_layer(routing='uniform', **kwargs)
    uniform.load_state_dict(layer.state_dict())
    x = torch.randn(2, 16, 5, 6)
    V_p = layer.num_components
    with torch.no_grad():
        before = layer(x)
        route_at_plan(layer, torch.full((4, V_p, 3), 1 / (3 * V_p)))
        torch.testing.assert_close(layer(x), uniform(x))
    assert not torch.allclose(before, uniform(x))


def test_route_at_plan_refuses_what_it_cannot_route():
    with pytest.raises(ValueError, match=r'plan must have shape \(4, 4, 3\)'):
        route_at_plan(small_layer(), torch.full((4, 3, 4), 1 / 12))
    with pytest.raises(ValueError, match="pose_from='mean_plus_plan'"):
        route_at_plan(small_layer(pose_from='mean_plus_plan'),
                      torch.full((4, 4, 3), 1 / 12))
    with pytest.raises(ValueError, match="pose_from='plan'"):
        route_at_plan(small_layer(pose_from='plan'),
                      torch.full((4, 4, 3), 1 / 12))


def test_mean_plans_average_every_layers_plans(seg_config):
    from mmengine.registry import init_default_scope
    from mmengine.runner import Runner
    cfg = load_offline_config(seg_config)
    init_default_scope(cfg.default_scope)
    torch.manual_seed(0)
    model = build_config_model(cfg).eval()
    batch = next(iter(Runner.build_dataloader(cfg.train_dataloader, seed=0)))
    plans = mean_plans(model, [batch])
    layers = {n: m for n, m in model.named_modules() if isinstance(m, HGWCaps)}
    assert set(plans) == set(layers)
    inputs = {}
    for n, m in layers.items():
        m.register_forward_hook(
            lambda mod, inp, out, n=n: inputs.__setitem__(n, inp[0]))
    with torch.no_grad():
        model(model.data_preprocessor(batch, True)['inputs'], mode='tensor')
        for n, m in layers.items():
            expected = m.route(inputs[n])['plan'].mean((0, 1))
            torch.testing.assert_close(plans[n], expected)
            # A mean of plans is a plan: marginals p and q.
            V_p, V_q = expected.shape[-2:]
            torch.testing.assert_close(plans[n].sum(-1),
                                       torch.full((m.out_types, V_p), 1 / V_p))
            torch.testing.assert_close(plans[n].sum(-2),
                                       torch.full((m.out_types, V_q), 1 / V_q))
    with pytest.raises(ValueError, match='at least one batch'):
        mean_plans(model, [])
    with pytest.raises(ValueError, match='no HGWCaps layer'):
        mean_plans(torch.nn.Linear(2, 2), [batch])
