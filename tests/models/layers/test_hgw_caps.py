"""The HGW capsule layer as a drop-in convolution."""
import contextlib
import copy
import itertools

import pytest
import torch
import torch.nn as nn
from mmcv.cnn import build_conv_layer
from mmengine.registry import DefaultScope
from torch.utils.checkpoint import checkpoint

import mmhgw  # noqa: F401
from mmhgw.models import CapsulePool, HGWCaps
from mmhgw.models.layers import zipf_structure
from mmhgw.models.layers.hgw_caps import (alignment, component_offset_pose,
                                          mean_pose)
from mmhgw.ops import cpp_available, pose_map

SMALL = dict(in_types=4, out_types=4, num_parts=3, part_dim=4)


def small_caps(in_channels=16, out_channels=8, **kwargs):
    args = dict(SMALL, kernel_size=3, stride=1, padding=1)
    args.update(kwargs)
    torch.manual_seed(0)
    return HGWCaps(in_channels, out_channels, **args)


@pytest.mark.parametrize(
    'stride,padding,dilation,size',
    list(itertools.product([1, 2, 3], [0, 1, 2], [1, 2], [(9, 13), (16, 7)])))
def test_output_size_matches_conv2d(stride, padding, dilation, size):
    caps = small_caps(stride=stride, padding=padding, dilation=dilation)
    conv = nn.Conv2d(16, 8, 3, stride=stride, padding=padding,
                     dilation=dilation)
    x = torch.randn(2, 16, *size)
    with torch.no_grad():
        assert caps.eval()(x).shape == conv(x).shape


def test_output_is_a_channels_last_view_of_the_capsules():
    """The capsules are computed location-major; the feature map is a view
    of them in channels-last strides (no copy), channel ``n * out_dim + o``
    holding component o of output type n."""
    caps = small_caps().eval()
    x = torch.randn(2, 16, 5, 7)
    with torch.no_grad():
        out = caps(x)
        terms = caps.forward_terms(x)[0]
    assert out.is_contiguous(memory_format=torch.channels_last)
    assert terms.is_contiguous(memory_format=torch.channels_last)
    torch.testing.assert_close(out, out.contiguous())
    # The output types are groups of out_dim consecutive channels.
    lengths = out.reshape(2, 4, 2, 5, 7).norm(dim=2)
    assert torch.allclose(lengths.amax(1), torch.ones(2, 5, 7), atol=1e-2)


@pytest.mark.parametrize('fill', [0.0, 3.0, 1e4])
@pytest.mark.parametrize('routing', ['hgw', 'uniform'])
def test_gradients_finite_for_degenerate_inputs(fill, routing):
    caps = small_caps(routing=routing).train()
    x = torch.full((2, 16, 6, 5), fill, requires_grad=True)
    out = caps(x)
    assert torch.isfinite(out).all()
    out.pow(2).sum().backward()
    assert torch.isfinite(x.grad).all()
    for name, p in caps.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), name


def test_activation_bounds_pose_length():
    caps = small_caps().eval()
    with torch.no_grad():
        out = caps(torch.randn(3, 16, 6, 6) * 5)
    lengths = out.view(3, 4, 2, 6, 6).norm(dim=2)
    assert (lengths <= 1 + 1e-6).all() and (lengths > 0).all()
    # The best-aligned type at each location has activation ~1.
    assert torch.allclose(lengths.amax(1), torch.ones(3, 6, 6), atol=1e-2)


def test_injected_regulariser_gradient_equals_explicit_sum():
    torch.manual_seed(1)
    x = torch.randn(2, 16, 5, 6)
    weight = torch.randn(2, 8, 5, 6)
    caps = small_caps().train()
    twin = copy.deepcopy(caps)

    (caps(x) * weight).sum().backward()

    out, reg, _ = twin.forward_terms(x)
    assert reg is not None and reg.item() > 0
    ((out * weight).sum() + reg).backward()

    for (name, a), b in zip(caps.named_parameters(), twin.parameters()):
        torch.testing.assert_close(a.grad, b.grad, msg=name)
    # And the regulariser does move the gradient.
    bare = copy.deepcopy(twin)
    bare.zero_grad()
    out, _, _ = bare.forward_terms(x)
    (out * weight).sum().backward()
    assert not torch.allclose(bare.subcapsules.grad, twin.subcapsules.grad)


@pytest.mark.parametrize('grad', ['envelope', 'unroll'])
def test_reg_scope_decides_whether_e_reaches_the_input(grad):
    """E alone (task output weighted 0): with ``reg_scope='layer'`` its
    gradient stops at the layer's own parameters; with ``'network'`` it
    also reaches the input, hence every layer before."""
    grads = {}
    for scope in ('layer', 'network'):
        torch.manual_seed(1)
        x = torch.randn(2, 16, 5, 6, requires_grad=True)
        caps = small_caps(reg_scope=scope, grad=grad).train()
        (caps(x) * 0).sum().backward()
        grads[scope] = (x.grad, caps.embed.weight.grad, caps.subcapsules.grad)
    x_layer, embed_layer, sub_layer = grads['layer']
    x_net, embed_net, sub_net = grads['network']
    assert x_layer is None or x_layer.abs().max() == 0
    assert x_net.abs().max() > 0
    # The layer's own embeddings get E's gradient either way, the same.
    assert embed_layer.abs().max() > 0
    torch.testing.assert_close(embed_layer, embed_net)
    torch.testing.assert_close(sub_layer, sub_net)


def test_reg_scope_changes_no_output_or_value():
    torch.manual_seed(1)
    x = torch.randn(2, 16, 5, 6)
    out_l, reg_l, _ = small_caps(reg_scope='layer').train().forward_terms(x)
    out_n, reg_n, _ = small_caps().train().forward_terms(x)
    torch.testing.assert_close(out_l, out_n)
    torch.testing.assert_close(reg_l, reg_n)


@pytest.mark.parametrize('grad', ['envelope', 'unroll'])
@pytest.mark.parametrize('routing,align_temperature', [('hgw', None),
                                                       ('uniform', None),
                                                       ('hgw', 0.01)])
def test_alignment_term_gradient_equals_explicit_sum(grad, routing,
                                                     align_temperature):
    """With ``align_weight`` the layer's gradient is that of the task, E
    and ``align_weight * beta * alignment(dist, T_align)``, the current
    beta, ``T_align`` the activation's temperature unless given."""
    torch.manual_seed(1)
    x = torch.randn(2, 16, 5, 6, requires_grad=True)
    weight = torch.randn(2, 8, 5, 6)
    caps = small_caps(align_weight=2.0, grad=grad, routing=routing,
                      align_temperature=align_temperature).train()
    caps.beta.fill_(0.3)
    twin = copy.deepcopy(caps)
    (caps(x) * weight).sum().backward()
    got = [x.grad.clone()] + [p.grad for p in caps.parameters()]
    got_sub = caps.subcapsules.grad

    x.grad = None
    out, reg, dist = twin.forward_terms(x)
    term = 2.0 * 0.3 * alignment(dist, align_temperature or 0.1)
    assert term.item() > 0
    ((out * weight).sum() + reg + term).backward()
    want = [x.grad] + [p.grad for p in twin.parameters()]
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b)
    # And the term does move the gradient, of the subcapsules and the input.
    x.grad = None
    bare = small_caps(grad=grad, routing=routing).train()
    bare.beta.fill_(0.3)
    (bare(x) * weight).sum().backward()
    assert not torch.allclose(bare.subcapsules.grad, got_sub)
    assert not torch.allclose(x.grad, got[0])


def test_alignment_weights_carry_no_gradient():
    """d A / d d_n is each type's share of the activations over the number
    of locations: A cannot fall by shifting the activations."""
    dist = torch.rand(2, 3, 5, dtype=torch.float64, requires_grad=True)
    alignment(dist, 0.1).backward()
    share = torch.softmax(-dist.detach() / 0.1, dim=-1)
    torch.testing.assert_close(dist.grad, share / 6)
    torch.testing.assert_close(alignment(dist, 0.1),
                               (share * dist).sum(-1).mean())


def test_alignment_term_only_in_training_and_zero_by_default():
    x = torch.randn(1, 16, 4, 4)
    assert small_caps().align_weight == 0
    caps = small_caps(align_weight=1.0)
    dist = caps.train().forward_terms(x)[2]
    assert caps._alignment_term(dist) is not None
    assert caps.eval()._alignment_term(dist) is None
    with torch.no_grad():
        assert caps.train()._alignment_term(dist) is None
    assert small_caps().train()._alignment_term(dist) is None


def test_no_regulariser_in_eval_or_under_ablation_b():
    x = torch.randn(1, 16, 4, 4)
    assert small_caps().eval().forward_terms(x)[1] is None
    assert small_caps(ablation='B').train().forward_terms(x)[1] is None


def test_uniform_and_hgw_routing_differ():
    x = torch.randn(2, 16, 6, 6)
    hgw = small_caps(routing='hgw', beta=0.5).eval()
    uniform = small_caps(routing='uniform', beta=0.5).eval()
    uniform.load_state_dict(hgw.state_dict())
    with torch.no_grad():
        a, b = hgw(x), uniform(x)
    assert a.shape == b.shape
    assert (a - b).abs().max() > 1e-3


def test_eval_is_deterministic_and_state_dict_round_trips():
    caps = small_caps().eval()
    x = torch.randn(2, 16, 7, 5)
    with torch.no_grad():
        first, second = caps(x), caps(x)
    torch.testing.assert_close(first, second, rtol=0, atol=0)
    caps.beta.fill_(0.3)
    torch.manual_seed(123)
    fresh = HGWCaps(16, 8, 3, padding=1, **SMALL).eval()
    fresh.load_state_dict(caps.state_dict())
    assert fresh.beta.item() == pytest.approx(0.3)
    with torch.no_grad():
        torch.testing.assert_close(fresh(x), caps(x), rtol=0, atol=0)


@pytest.mark.parametrize('kwargs,match', [
    (dict(in_channels=18), 'in_channels=18 must be divisible by in_types=4'),
    (dict(out_channels=10), 'out_channels=10 must be divisible by'),
    (dict(groups=2), 'groups must be 1'),
    (dict(padding_mode='mirror'), 'padding_mode must be one of'),
    (dict(routing='dynamic'), 'routing must be one of'),
    (dict(ablation='D'), 'ablation must be one of'),
    (dict(grad='implicit'), 'grad must be one of'),
    (dict(eps=0.0), 'eps must be'),
    (dict(beta=1.5), 'beta must be in'),
    (dict(reg_scope='model'), 'reg_scope must be one of'),
    (dict(align_weight=-1.0), 'align_weight must be a finite number >= 0'),
    (dict(align_weight=float('nan')), 'align_weight must be a finite'),
    (dict(align_weight=float('inf')), 'align_weight must be a finite'),
    (dict(align_temperature=0.0), 'align_temperature must be a positive'),
    (dict(align_temperature=float('nan')), 'align_temperature must be'),
    (dict(temperature=-1.0), 'temperature must be a positive'),
    (dict(subcapsule_std=0.0), 'subcapsule_std must be a positive'),
    (dict(subcapsule_std=float('inf')), 'subcapsule_std must be a positive'),
    (dict(subcapsule_std='0.3'), "subcapsule_std must be a number, got '0.3'"),
    (dict(pose_gain=0.0), 'pose_gain must be a positive'),
    (dict(pose_gain=float('nan')), 'pose_gain must be a positive'),
    (dict(temperature=True), 'temperature must be a number, got True'),
    (dict(beta='0.5'), 'beta must be a number'),
])
def test_bad_arguments_raise_value_error(kwargs, match):
    args = dict(in_channels=16, out_channels=8)
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        small_caps(**args)


def test_subcapsule_std_scales_the_parts_draw_only():
    default, small = small_caps(), small_caps(subcapsule_std=0.3)
    # The same draw scaled: the random stream, hence every other
    # parameter of a seeded model, is unchanged.
    torch.testing.assert_close(small.subcapsules, 0.3 * default.subcapsules)
    torch.testing.assert_close(small.embed.weight, default.embed.weight,
                               rtol=0, atol=0)
    torch.testing.assert_close(small.pose_weight, default.pose_weight, rtol=0,
                               atol=0)
    big = small_caps(out_channels=32, out_types=32, num_parts=16,
                     subcapsule_std=0.3)
    assert big.subcapsules.std().item() == pytest.approx(0.3, rel=0.1)


def test_pose_gain_scales_the_pose_map_draw_and_not_the_output():
    torch.manual_seed(0)
    default = small_caps(pose_from='plan').train()
    torch.manual_seed(0)
    large = small_caps(pose_from='plan', pose_gain=4.0).train()
    torch.testing.assert_close(large.pose_weight, 4 * default.pose_weight)
    torch.testing.assert_close(large.subcapsules, default.subcapsules, rtol=0,
                               atol=0)
    x = torch.randn(2, 16, 5, 4, requires_grad=True)
    out_d, out_l = default(x), large(x)
    # The capsules are rescaled to their activations: the same output, up
    # to the safe norm's eps ...
    torch.testing.assert_close(out_l, out_d, rtol=1e-4, atol=1e-4)
    # ... but the gradient through the pose is inversely as large.
    w = torch.randn_like(out_d)
    g_d, = torch.autograd.grad((out_d * w).sum(), default.pose_weight)
    g_l, = torch.autograd.grad((out_l * w).sum(), large.pose_weight)
    torch.testing.assert_close(4 * g_l, g_d, rtol=1e-2, atol=1e-5)


def test_ablations_set_their_knobs():
    assert small_caps(ablation='A').solver_cfg['regularizer'] == 'entropic'
    assert small_caps(ablation='B').reg_weight == 0
    c = small_caps(ablation='C', beta=0.2)
    # C keeps the Wasserstein weight; only the observed structure goes.
    assert c.beta.item() == pytest.approx(0.2) and not c.use_observed
    assert c.reg_weight == small_caps().reg_weight


def test_ablation_c_structures_are_embeddings_with_the_same_w_weight():
    x = torch.randn(2, 16, 5, 4)
    full, c = small_caps().train(), small_caps(ablation='C').train()
    X_p, _ = c._components(x)
    s_full, s_c = full._structures(X_p), c._structures(X_p)
    assert s_c.beta == s_full.beta == 0.5
    torch.testing.assert_close(c._cross_cost(X_p), full._cross_cost(X_p))
    torch.testing.assert_close(s_c.C_p, s_c.K_pp)
    torch.testing.assert_close(s_c.C_q, s_c.K_qq)
    assert (s_c.obs_p == 1).all() and (s_c.obs_q == 1).all()
    assert not torch.allclose(s_full.C_p, s_c.C_p)


@pytest.mark.parametrize('observed', ['coactivation', 'counts'])
@pytest.mark.parametrize('backend', ['torch', 'auto'])
def test_ablation_c_uses_no_observed_structure_anywhere(
        monkeypatch, observed, backend):
    """Perturbing C_obs changes the full model's output, regulariser and
    gradients, and nothing of ablation C's."""
    from mmhgw.models.layers import hgw_caps_structures as hgw_caps
    from mmhgw.ot import structures as ot_structures
    x = torch.randn(2, 16, 5, 4)
    weight = torch.randn(2, 8, 5, 4)

    def run(ablation):
        caps = small_caps(ablation=ablation, observed=observed,
                          backend=backend).train()
        out, reg, dist = caps.forward_terms(x)
        ((out * weight).sum() + reg).backward()
        return [out, reg, dist] + [p.grad for p in caps.parameters()]

    before = {ab: run(ab) for ab in (None, 'C')}
    gen = torch.Generator().manual_seed(3)
    monkeypatch.setattr(
        ot_structures, 'zipf_structure', lambda parts: 0.5 + 0.5 * torch.rand(
            parts.shape[:-1] + parts.shape[-2:-1], generator=gen))
    monkeypatch.setattr(
        hgw_caps, 'count_structure', lambda x, *args: 0.1 + 0.9 * torch.rand(
            x.shape[0], x.shape[2] * x.shape[3], 4, 4, generator=gen))
    after = {ab: run(ab) for ab in (None, 'C')}
    for a, b in zip(before['C'], after['C']):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    assert not torch.allclose(before[None][0], after[None][0])
    assert not torch.allclose(before[None][1], after[None][1])


def count_structure_by_loops(x, types, k, stride, padding, dilation):
    B, C, H, W = x.shape
    a = x.view(B, types, C // types, H, W).pow(2).mean(2)
    a = a / (1 + a)
    a = torch.nn.functional.pad(a, (padding, ) * 4)
    H_out = (H + 2 * padding - dilation * (k - 1) - 1) // stride + 1
    W_out = (W + 2 * padding - dilation * (k - 1) - 1) // stride + 1
    out = torch.zeros(B, H_out * W_out, types, types)
    for b, i, j, y, x_ in itertools.product(range(B), range(types),
                                            range(types), range(H_out),
                                            range(W_out)):
        rows = [y * stride + dy * dilation for dy in range(k)]
        cols = [x_ * stride + dx * dilation for dx in range(k)]
        w = sum(a[b, i, r, c] * a[b, j, r, c] for r in rows for c in cols)
        out[b, y * W_out + x_, i, j] = 1 / (1 + w)
    return out


@pytest.mark.parametrize('stride,padding,dilation', [(1, 1, 1), (2, 0, 2)])
def test_count_structure_counts_co_present_patch_positions(
        stride, padding, dilation):
    from mmhgw.models.layers import count_structure
    x = torch.randn(2, 6, 7, 6) * 2
    x[:, 4:] = 0  # type 2 absent everywhere: no interaction, c = 1
    C = count_structure(x, 3, 3, stride, padding, dilation)
    torch.testing.assert_close(
        C, count_structure_by_loops(x, 3, 3, stride, padding, dilation))
    assert (C[..., 2, :] == 1).all() and (C[..., :, 2] == 1).all()
    assert (C >= 1 / 10).all() and (C <= 1).all()
    # Eq. 18 from the data: at most k * k positions interact.
    full = count_structure(torch.full((1, 6, 5, 5), 1e4), 3, 3)
    torch.testing.assert_close(full, torch.full_like(full, 1 / 10), atol=1e-3,
                               rtol=0)


@pytest.mark.parametrize('backend', ['torch', 'auto'])
def test_counts_variant_trains_and_differs_from_coactivation(backend):
    x = torch.randn(2, 16, 7, 5)
    caps = small_caps(observed='counts', stride=2, dilation=2,
                      backend=backend).train()
    coact = small_caps(stride=2, dilation=2).train()
    out = caps(x)
    assert out.shape == coact(x).shape
    out.pow(2).sum().backward()
    assert torch.isfinite(caps.subcapsules.grad).all()
    r = caps.route(x)
    assert r['obs_p'].shape == r['K_pp'].shape
    assert r['obs_p'].min() < 0.5  # counts reach beyond one interaction
    with torch.no_grad():
        assert not torch.allclose(caps.eval()(x), coact.eval()(x))
    with pytest.raises(ValueError, match='observed must be one of'):
        small_caps(observed='labels')


@pytest.mark.parametrize('observed', ['coactivation', 'counts'])
@pytest.mark.parametrize('geometry', [
    dict(padding=1, padding_mode='reflect'),
    dict(padding=1, padding_mode='replicate', stride=2),
    dict(kernel_size=(3, 5), padding=(1, 2), padding_mode='circular'),
    dict(padding='same', dilation=2),
])
def test_padding_as_conv2d_pads_it(observed, geometry):
    """The output grid is nn.Conv2d's for every padding mode and for
    ``padding='same'``; the counted observed structure counts the patches
    as the embedding pads them: those of the padded input, unpadded."""
    from mmhgw.models.layers import count_structure
    args = dict(kernel_size=3, stride=1, padding=0)
    args.update(geometry)
    torch.manual_seed(0)
    caps = HGWCaps(16, 8, observed=observed, **dict(SMALL, **args)).eval()
    conv = nn.Conv2d(16, 8, **args)
    x = torch.randn(2, 16, 9, 7) * 2
    with torch.no_grad():
        out = caps(x)
    assert out.shape == conv(x).shape and torch.isfinite(out).all()
    assert caps.embed.padding_mode == conv.padding_mode
    if observed == 'counts':
        mode = ('constant'
                if conv.padding_mode == 'zeros' else conv.padding_mode)
        padded = nn.functional.pad(x, conv._reversed_padding_repeated_twice,
                                   mode=mode)
        expected = count_structure(padded, 4, conv.kernel_size, conv.stride, 0,
                                   conv.dilation)
        torch.testing.assert_close(caps.route(x)['obs_p'], expected)
    if conv.padding_mode != 'zeros':
        # The mode matters: zero padding gives other capsules at the border.
        zeros = copy.deepcopy(caps)
        zeros.embed.padding_mode = 'zeros'
        with torch.no_grad():
            assert not torch.allclose(zeros(x), out)


def test_zipf_structure_is_bounded_and_one_without_interaction():
    parts = torch.randn(5, 6, 4) * 10
    parts[:, 0] = 0
    C = zipf_structure(parts)
    assert (C > 0.5).all() and (C <= 1).all()
    assert torch.all(C[:, 0, :] == 1) and torch.all(C[:, :, 0] == 1)
    torch.testing.assert_close(C, C.transpose(-1, -2))


@pytest.mark.parametrize('scope', ['mmdet', 'mmseg'])
def test_build_conv_layer_finds_hgwcaps_in_both_scopes(scope):
    with DefaultScope.overwrite_default_scope(scope):
        layer = build_conv_layer(dict(type='HGWCaps',
                                      **SMALL), 16, 8, kernel_size=3, stride=2,
                                 padding=2, dilation=2, bias=False)
    assert isinstance(layer, HGWCaps)
    x = torch.randn(1, 16, 11, 9)
    ref = nn.Conv2d(16, 8, 3, stride=2, padding=2, dilation=2)
    assert layer.eval()(x).shape == ref(x).shape


def test_stock_mmdet_resnet_takes_hgwcaps_through_dcn():
    from mmdet.models.backbones import ResNet
    torch.manual_seed(0)
    backbone = ResNet(
        depth=50, base_channels=8, out_indices=(0, 1, 2, 3),
        dcn=dict(type='HGWCaps', in_types=4, out_types=4, num_parts=3,
                 part_dim=4), stage_with_dcn=(False, False, True, True),
        init_cfg=None)
    backbone.init_weights()
    caps = [m for m in backbone.modules() if isinstance(m, HGWCaps)]
    assert len(caps) == 6 + 3  # every block of stages 3 and 4
    assert isinstance(backbone.layer3[0].conv2, HGWCaps)
    assert not isinstance(backbone.layer2[0].conv2, HGWCaps)
    backbone.train()
    x = torch.randn(2, 3, 64, 48)
    outs = backbone(x)
    assert [o.shape[1] for o in outs] == [32, 64, 128, 256]
    assert outs[3].shape[-2:] == (2, 2)
    sum(o.mean() for o in outs).backward()
    for cap in caps:
        assert torch.isfinite(cap.subcapsules.grad).all()
        assert cap.subcapsules.grad.abs().sum() > 0


def test_capsule_pool():
    x = torch.randn(2, 12, 5, 4)
    plain = CapsulePool(num_types=3, weighted=False)(x)
    torch.testing.assert_close(plain, nn.AdaptiveAvgPool2d(1)(x))
    # Weighted pooling ignores absent (zero-length) capsules.
    caps = torch.zeros(1, 3, 4, 2, 2)
    caps[..., 0, 0] = torch.randn(3, 4)
    pooled = CapsulePool(num_types=3)(caps.reshape(1, 12, 2, 2))
    torch.testing.assert_close(pooled.view(3, 4), caps[0, ..., 0, 0],
                               atol=1e-5, rtol=1e-4)
    with pytest.raises(ValueError, match='divisible by num_types=5'):
        CapsulePool(num_types=5)(x)


@pytest.mark.parametrize('scope', ['mmengine', 'mmdet', 'mmseg'])
def test_capsule_pool_is_exported_and_built_from_configs(scope):
    """Classification heads elsewhere build it by config, in their scope."""
    from mmengine.registry import MODELS

    import mmhgw.models.layers as layers
    assert 'CapsulePool' in layers.__all__
    with DefaultScope.overwrite_default_scope(scope):
        pool = MODELS.build(dict(type='CapsulePool', num_types=4))
    assert isinstance(pool, CapsulePool)
    x = torch.zeros(2, 8, 3, 3, requires_grad=True)  # every capsule absent
    out = pool(x)
    assert out.shape == (2, 8, 1, 1)
    out.sum().backward()
    assert torch.isfinite(x.grad).all()


def test_regulariser_ignores_the_diagonal():
    from mmhgw.ot import kl_off_diagonal
    C = torch.rand(3, 5, 5) * 0.5 + 0.5
    K = C.clone()
    K.diagonal(dim1=-2, dim2=-1).fill_(0.01)  # self-distance at the floor
    assert kl_off_diagonal(K, C).item() == pytest.approx(0.0, abs=1e-7)
    K[0, 1, 2] = 0.9
    assert kl_off_diagonal(K, C).item() > 0


@pytest.mark.parametrize('routing,ablation,reg_scope',
                         [('hgw', None, 'network'), ('hgw', 'A', 'network'),
                          ('hgw', 'C', 'network'),
                          ('uniform', None, 'network'),
                          ('hgw', None, 'layer')])
@pytest.mark.parametrize('training', [True, False])
def test_backends_give_the_same_layer(routing, ablation, reg_scope, training):
    """The fused kernels and the torch reference: same output, regulariser,
    distances and gradients (float64: same iterates up to round-off); C
    (no observed structure) takes the structures kernels' other branch."""
    from mmhgw.ops import cpp_available
    if not cpp_available():
        pytest.skip('C++ extension not built')
    x = torch.randn(2, 16, 5, 7, dtype=torch.float64)
    results = []
    for backend in ('torch', 'cpp'):
        caps = small_caps(routing=routing, ablation=ablation,
                          reg_scope=reg_scope, backend=backend).double()
        caps.train(training)
        xi = x.clone().requires_grad_()
        out, reg, dist = caps.forward_terms(xi)
        assert (reg is not None) == training
        loss = out.pow(2).sum() + dist.sum() + (reg if training else 0)
        loss.backward()
        grads = [xi.grad] + [p.grad for p in caps.parameters()]
        results.append((out, reg, dist, grads))
    (out0, reg0, dist0, g0), (out1, reg1, dist1, g1) = results
    torch.testing.assert_close(out1, out0, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(dist1, dist0, rtol=1e-10, atol=1e-12)
    if training:
        torch.testing.assert_close(reg1, reg0, rtol=1e-10, atol=1e-12)
    for a, b in zip(g1, g0):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-11)


@pytest.mark.parametrize('reg_scope', ['network', 'layer'])
def test_training_takes_the_structures_kernels_for_either_reg_scope(
        reg_scope, monkeypatch):
    """Where the C++ kernels run, neither the factors nor E (on either
    gradient path) fall back to the torch composition."""
    from mmhgw.ops import cpp_available, hgw_structures
    if not cpp_available():
        pytest.skip('C++ extension not built')

    def composition(*args):
        raise AssertionError('the torch composition ran')

    monkeypatch.setattr(hgw_structures, '_reference_terms', composition)
    caps = small_caps(reg_scope=reg_scope, backend='cpp').train()
    x = torch.randn(2, 16, 5, 6, requires_grad=True)
    out, reg, _ = caps.forward_terms(x)
    (out.square().sum() + reg).backward()
    assert caps.embed.weight.grad.abs().max() > 0


def test_unrolled_and_envelope_paths_agree_in_value():
    x = torch.randn(2, 16, 4, 5, dtype=torch.float64)
    with torch.no_grad():
        env = small_caps(grad='envelope').double().eval()(x)
        unr = small_caps(grad='unroll').double().eval()(x)
    torch.testing.assert_close(env, unr, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize('backend', ['torch', 'auto'])
def test_layer_keeps_nothing_plan_sized_for_backward(backend):
    """The routing op solves again in backward: no [B, L, N, V_p, V_q]
    tensor is kept between forward and backward, nor the parts
    [B, L, N, V_q, d] (the op applies the pose map; its backward gets the
    parts from the plans), nor h1 [B, L, V_p, V_p]: backward forms it
    again from the components, by the structures kernels or the torch
    composition, whichever made it."""
    x = torch.randn(1, 16, 12, 12, requires_grad=True)
    plan_bytes = 1 * 144 * 8 * 8 * 4 * 4  # B L N V_p V_q float32
    caps = small_caps(in_types=8, out_types=8, num_parts=4,
                      backend=backend).train()
    storages = {}

    def pack(t):
        s = t.untyped_storage()
        storages[s.data_ptr()] = s.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = caps(x)
    out.sum().backward()
    parts_bytes = 1 * 144 * 8 * 4 * 4 * 4  # B L N V_q d float32
    h1_bytes = 1 * 144 * 8 * 8 * 4  # B L V_p V_p float32
    largest = max(storages.values())
    assert largest < h1_bytes < parts_bytes < plan_bytes


STRUCTURES_PATHS = {
    # The C++ structures kernels.
    'kernels': dict(backend='auto'),
    'kernels-layer-E': dict(backend='auto', reg_scope='layer'),
    # The torch composition, checkpointed: another routing backend, E on
    # the layer's own embedding, an observed structure from the input.
    'composition': dict(backend='torch'),
    'composition-layer-E': dict(backend='torch', reg_scope='layer'),
    'composition-counts': dict(backend='auto', observed='counts'),
}


@pytest.mark.parametrize('wrap', ['none', 'checkpoint', 'measured'])
@pytest.mark.parametrize('path', list(STRUCTURES_PATHS))
def test_h1_formed_again_in_backward_gives_the_same_gradients(
        path, wrap, monkeypatch):
    """Training keeps the components, not h1: backward forms h1 again, and
    every gradient is bit for bit the one of keeping it, whichever way the
    forward made h1; also under torch.utils.checkpoint and under other
    saved-tensor hooks (which still see every other saved tensor)."""
    if path == 'kernels' and not cpp_available():
        pytest.skip('C++ extension not built')
    torch.manual_seed(0)
    caps = small_caps(in_channels=32, out_channels=32, in_types=16,
                      out_types=8, num_parts=8, reg_weight=10.0,
                      **STRUCTURES_PATHS[path]).train()
    caps.beta.fill_(0.5)
    x = torch.randn(2, 32, 6, 7)
    seen = []

    def measured(fn, *args):

        def pack(t):
            seen.append(tuple(t.shape))
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            return fn(*args)

    call = dict(none=lambda f, a: f(a),
                checkpoint=lambda f, a: checkpoint(f, a, use_reentrant=False),
                measured=measured)[wrap]

    def gradients():
        caps.zero_grad()
        xi = x.clone().requires_grad_()
        call(caps, xi).square().sum().backward()
        return [xi.grad] + [p.grad for p in caps.parameters()]

    h1_shape = (2, 42, 16, 16)  # B, L, V_p, V_p
    formed_again = gradients()
    seen_formed_again, seen[:] = list(seen), []
    monkeypatch.setattr(HGWCaps, '_h1_recomputed',
                        lambda self, *args: contextlib.nullcontext())
    kept = gradients()
    if wrap == 'measured':
        # One tensor of h1's shape fewer (the observed structure, of that
        # shape too, stays where it is given).
        assert seen_formed_again and len(seen_formed_again) == len(seen) - 1
        assert (seen_formed_again.count(h1_shape) == seen.count(h1_shape) - 1)
    for a, b in zip(formed_again, kept):
        assert (a is None) == (b is None)
        if a is not None:
            assert torch.equal(a, b)


def test_bad_backend_raises():
    with pytest.raises(ValueError, match='backend must be one of'):
        small_caps(backend='cuda')


@pytest.mark.parametrize('seed', [0, 1])
def test_unrolled_gradients_are_finite_at_the_papers_eps(seed):
    """grad='unroll' through converging iterations at eps = 1e-3: one
    near-permutation problem in the batch used to make every subcapsule
    gradient NaN (the rounding's backward)."""
    torch.manual_seed(seed)
    caps = HGWCaps(64, 64, 3, padding=1, in_types=16, out_types=8, num_parts=4,
                   part_dim=4, eps=1e-3, outer_iters=4, inner_iters=10,
                   grad='unroll').train()
    x = torch.randn(2, 64, 6, 6) * 3
    caps(x).square().sum().backward()
    for name, p in caps.named_parameters():
        assert torch.isfinite(p.grad).all(), name


def test_mean_pose_is_the_pose_of_uniform_routing():
    """The pose map of the components' mean is what uniform routing's
    barycentric parts give; with HGW routing it keeps the HGW distances
    and activations and changes only the poses."""
    x = torch.randn(2, 16, 5, 4)
    assert small_caps().pose_from == 'mean'
    with torch.no_grad():
        uniform = small_caps(routing='uniform', pose_from='plan').eval()(x)
        uniform_mean = small_caps(routing='uniform', pose_from='mean').eval()
        torch.testing.assert_close(uniform_mean(x), uniform, rtol=1e-5,
                                   atol=1e-6)
        hgw = small_caps(pose_from='plan').eval()
        hgw_mean = small_caps(pose_from='mean').eval()
        out, _, dist = hgw.forward_terms(x)
        out_mean, _, dist_mean = hgw_mean.forward_terms(x)
    torch.testing.assert_close(dist_mean, dist)
    assert not torch.allclose(out_mean, out)
    # Training: the task reaches the pose map through the mean and the
    # subcapsules through the distances.
    hgw_mean.train()
    hgw_mean(x).pow(2).sum().backward()
    for name in ('pose_weight', 'subcapsules', 'embed.weight'):
        grad = hgw_mean.get_parameter(name).grad
        assert grad is not None and grad.abs().sum() > 0, name


@pytest.mark.parametrize('grad', ['envelope', 'unroll'])
def test_mean_plus_plan_pose_starts_as_the_mean_and_learns_the_offsets(grad):
    """``pose_from='mean_plus_plan'``: built under one seed it is the
    default layer plus a zero map, so its fresh output is the default's;
    with that map set, the pose is the mean's plus the map of the plan's
    parts' offsets from the mean (checked against the plan's pose, which
    ``pose_from='plan'`` gives), the offsets 0 under uniform routing; the
    task trains the offsets' map from the start."""
    x = torch.randn(2, 16, 5, 4)
    solver = dict(grad=grad)
    mean = small_caps(pose_from='mean', solver_cfg=solver).eval()
    plus = small_caps(pose_from='mean_plus_plan', solver_cfg=solver).eval()
    plan = small_caps(pose_from='plan', solver_cfg=solver).eval()
    with torch.no_grad():
        torch.testing.assert_close(plus(x), mean(x))
        W_r = torch.randn_like(plus.plan_pose_weight)
        plus.plan_pose_weight.copy_(W_r)
        # pose = W m + W_r (parts - m): the plan's layer with map W_r, plus
        # the mean's with W - W_r.
        plan.pose_weight.copy_(W_r)
        X_p, _ = plus._components(x)
        s = plus._structures(X_p, plus._observed_p(x))
        _, parts, _ = plus._solve(X_p, s)
        expect = (pose_map(parts, W_r) +
                  mean_pose(X_p, plus.pose_weight - W_r))
        out, _, dist = plus.forward_terms(x)
        _, _, dist_plan = plan.forward_terms(x)
        torch.testing.assert_close(dist, dist_plan)
        torch.testing.assert_close(
            out, plus._output(plus._capsules(expect, dist), (5, 4)), rtol=1e-4,
            atol=1e-5)
        uniform = small_caps(routing='uniform', pose_from='mean_plus_plan',
                             solver_cfg=solver).eval()
        uniform.plan_pose_weight.copy_(W_r)
        uniform_mean = small_caps(routing='uniform', pose_from='mean',
                                  solver_cfg=solver).eval()
        torch.testing.assert_close(uniform(x), uniform_mean(x), rtol=1e-4,
                                   atol=1e-5)
    fresh = small_caps(pose_from='mean_plus_plan', solver_cfg=solver).train()
    fresh(x).pow(2).sum().backward()
    assert fresh.plan_pose_weight.grad.abs().sum() > 0


@pytest.mark.parametrize('components', ['types', 'positions'])
def test_mean_plus_components_plus_plan_pose_sums_both_offsets(components):
    """``pose_from='mean_plus_components_plus_plan'``: fresh, the default
    layer; with both maps set, the mean's pose plus the components'
    offsets' pose plus the plan's parts' offsets' pose, each through its
    own map; under uniform routing the layer of ``'mean_plus_components'``
    (the plan's parts are the mean); the task trains both maps."""
    x = torch.randn(2, 16, 5, 4)
    kw = dict(components=components, component_norm=True)
    mean = small_caps(pose_from='mean', **kw).eval()
    both = small_caps(pose_from='mean_plus_components_plus_plan', **kw).eval()
    plus = small_caps(pose_from='mean_plus_plan', **kw).eval()
    comps = small_caps(pose_from='mean_plus_components', **kw).eval()
    with torch.no_grad():
        torch.testing.assert_close(both(x), mean(x))
        W_r = torch.randn_like(both.plan_pose_weight)
        W_c = torch.randn_like(both.component_pose_weight)
        both.plan_pose_weight.copy_(W_r)
        both.component_pose_weight.copy_(W_c)
        plus.plan_pose_weight.copy_(W_r)
        comps.component_pose_weight.copy_(W_c)
        X_p, _ = both._components(x)
        s = both._structures(X_p, both._observed_p(x))
        _, parts, _ = both._solve(X_p, s)
        expect = (mean_pose(X_p, both.pose_weight) +
                  pose_map(parts - X_p.mean(-2)[:, :, None, None], W_r) +
                  component_offset_pose(X_p, W_c))
        out, _, dist = both.forward_terms(x)
        torch.testing.assert_close(dist, plus.forward_terms(x)[2])
        torch.testing.assert_close(
            out, both._output(both._capsules(expect, dist), (5, 4)), rtol=1e-4,
            atol=1e-5)
        uniform = small_caps(routing='uniform',
                             pose_from='mean_plus_components_plus_plan',
                             **kw).eval()
        uniform_comps = small_caps(routing='uniform',
                                   pose_from='mean_plus_components',
                                   **kw).eval()
        uniform.plan_pose_weight.copy_(W_r)
        uniform.component_pose_weight.copy_(W_c)
        uniform_comps.component_pose_weight.copy_(W_c)
        torch.testing.assert_close(uniform(x), uniform_comps(x), rtol=1e-4,
                                   atol=1e-5)
    fresh = small_caps(pose_from='mean_plus_components_plus_plan',
                       **kw).train()
    fresh(x).pow(2).sum().backward()
    assert fresh.plan_pose_weight.grad.abs().sum() > 0
    assert fresh.component_pose_weight.grad.abs().sum() > 0


@pytest.mark.parametrize(
    'pose_from,offsets,reads_plan',
    [('mean', set(), False), ('plan', set(), True),
     ('mean_plus_plan', {'plan'}, True),
     ('mean_plus_components', {'components'}, False),
     ('mean_plus_components_plus_plan', {'plan', 'components'}, True)])
def test_pose_offsets_name_the_maps_the_layer_builds(pose_from, offsets,
                                                     reads_plan):
    """``pose_offsets`` and ``pose_reads_plan`` say which offset maps exist
    and whether the solve must give the plan's parts (the analysis tools
    read them), for every ``pose_from``."""
    layer = small_caps(pose_from=pose_from)
    assert layer.pose_offsets == offsets
    assert layer.pose_reads_plan == reads_plan
    assert hasattr(layer, 'plan_pose_weight') == ('plan' in offsets)
    assert hasattr(layer, 'component_pose_weight') == ('components' in offsets)


def test_mean_plus_components_pose_reads_every_component_without_a_plan():
    """``pose_from='mean_plus_components'``, the control without a plan:
    fresh, the default layer; with its map set, the mean's pose plus the
    map of the components' offsets from their mean, the same under either
    routing up to the activations; the task trains the map from the
    start."""
    x = torch.randn(2, 16, 5, 4)
    mean = small_caps(pose_from='mean').eval()
    comps = small_caps(pose_from='mean_plus_components').eval()
    assert comps.component_pose_weight.shape == (4, 4 * 4, 2)
    with torch.no_grad():
        torch.testing.assert_close(comps(x), mean(x))
        W_c = torch.randn_like(comps.component_pose_weight)
        comps.component_pose_weight.copy_(W_c)
        X_p, _ = comps._components(x)
        offsets = X_p - X_p.mean(-2, keepdim=True)
        expect = mean_pose(X_p, comps.pose_weight) + torch.einsum(
            'blk,nko->blno', offsets.flatten(-2), W_c)
        out, _, dist = comps.forward_terms(x)
        _, _, dist_mean = mean.forward_terms(x)
        torch.testing.assert_close(dist, dist_mean)
        torch.testing.assert_close(
            out, comps._output(comps._capsules(expect, dist), (5, 4)))
    fresh = small_caps(pose_from='mean_plus_components').train()
    fresh(x).pow(2).sum().backward()
    assert fresh.component_pose_weight.grad.abs().sum() > 0
