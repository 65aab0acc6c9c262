"""HGWCaps(components='positions'): one component per patch position."""
import itertools

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from mmhgw.models import HGWCaps
from mmhgw.models.layers.position_embedding import PositionEmbedding

SMALL = dict(in_types=4, out_types=4, num_parts=3, part_dim=4)


def positions_caps(**kwargs):
    args = dict(SMALL, kernel_size=3, padding=1, components='positions',
                pose_from='mean_plus_components')
    args.update(kwargs)
    torch.manual_seed(0)
    return HGWCaps(16, 8, **args)


def unfolded_oracle(x, weight, kernel_size, stride, padding, dilation, mode):
    """Components [B, L, k_h k_w, d] by padding and unfolding the input,
    then the shared map: the definition, by another route."""
    kh, kw = kernel_size
    if mode != 'zeros':
        x = F.pad(x, (padding, padding, padding, padding), mode=mode)
        padding = 0
    patches = F.unfold(x, (kh, kw), dilation=dilation, padding=padding,
                       stride=stride)
    B, _, L = patches.shape
    patches = patches.view(B, x.shape[1], kh * kw, L)
    return torch.einsum('bcpl,dc->blpd', patches, weight.flatten(1))


@pytest.mark.parametrize(
    'kernel_size,stride,padding,dilation,mode',
    list(
        itertools.product([(3, 3), (3, 2)], [1, 2], [0, 1, 2], [1, 2],
                          ['zeros', 'reflect', 'circular'])))
def test_components_are_the_embedded_positions(kernel_size, stride, padding,
                                               dilation, mode):
    caps = positions_caps(kernel_size=kernel_size, stride=stride,
                          padding=padding, dilation=dilation,
                          padding_mode=mode)
    x = torch.randn(2, 16, 9, 11)
    with torch.no_grad():
        X_p, size = caps._components(x)
    expected = unfolded_oracle(x, caps.embed.weight, kernel_size, stride,
                               padding, dilation, mode)
    torch.testing.assert_close(X_p, expected)
    conv = nn.Conv2d(16, 8, kernel_size, stride=stride, padding=padding,
                     dilation=dilation, padding_mode=mode)
    assert tuple(conv(x).shape[-2:]) == size
    assert caps.num_components == kernel_size[0] * kernel_size[1]


def test_same_padding_keeps_the_grid():
    caps = positions_caps(padding='same')
    x = torch.randn(1, 16, 6, 7)
    with torch.no_grad():
        assert caps.eval()(x).shape == (1, 8, 6, 7)


def test_a_component_is_what_is_at_a_position_not_which():
    """Swapping two pixels of a patch swaps the two components; the HGW
    distance, a matching of sets, does not change."""
    caps = positions_caps(kernel_size=2, padding=0).eval()
    x = torch.randn(1, 16, 2, 2)
    swapped = x.clone()
    swapped[..., 0, 0], swapped[..., 1, 1] = x[..., 1, 1], x[..., 0, 0]
    with torch.no_grad():
        X_p = caps._components(x)[0]
        X_s = caps._components(swapped)[0]
        torch.testing.assert_close(X_s[:, :, [3, 1, 2, 0]], X_p)
        torch.testing.assert_close(
            caps.route(swapped)['distance'],
            caps.route(x)['distance'], atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize('routing', ['hgw', 'uniform'])
def test_layer_trains_and_its_op_routes_as_the_reference(routing):
    caps = positions_caps(routing=routing).train()
    nn.init.normal_(caps.component_pose_weight)
    x = torch.randn(2, 16, 5, 6, requires_grad=True)
    out = caps(x)
    assert out.shape == (2, 8, 5, 6)
    out.square().sum().backward()
    for name, p in [('x', x), ('embed', caps.embed.weight),
                    ('subcapsules', caps.subcapsules),
                    ('pose', caps.component_pose_weight)]:
        assert p.grad is not None and p.grad.abs().sum() > 0, name
        assert torch.isfinite(p.grad).all(), name
    caps.eval()
    with torch.no_grad():
        _, _, dist = caps.forward_terms(x)
        torch.testing.assert_close(dist,
                                   caps.route(x)['distance'], atol=1e-5,
                                   rtol=1e-4)


def test_state_dict_holds_the_shared_map_only():
    caps = positions_caps()
    state = caps.state_dict()
    assert state['embed.weight'].shape == (4, 16, 1, 1)
    assert not any(k.endswith('select') for k in state)
    assert state['component_pose_weight'].shape == (4, 9 * 4, 2)
    fresh = positions_caps()
    fresh.load_state_dict(state)
    # The geometry reads as a convolution's (tools rebuild the replaced
    # convolution from it).
    assert caps.embed.kernel_size == (3, 3) and caps.embed.padding == (1, 1)


def test_half_model_keeps_the_embedding_in_float32():
    caps = positions_caps().eval().half()
    assert caps.embed.weight.dtype == torch.float32
    assert caps.embed.select.dtype == torch.float32
    x = torch.randn(1, 16, 4, 4).half()
    with torch.no_grad():
        out = caps(x)
    assert out.dtype == torch.float16 and torch.isfinite(out).all()


def test_embedding_draws_like_a_1x1_convolution():
    torch.manual_seed(0)
    emb = PositionEmbedding(64, 8, 3, padding=1)
    bound = 1 / 64**0.5  # kaiming_uniform(a=sqrt(5)): 1 / sqrt(fan_in)
    assert emb.weight.abs().max() <= bound
    assert emb.weight.abs().max() > bound / 2


@pytest.mark.parametrize('kwargs,match', [
    (dict(components='pixels'), 'components'),
    (dict(observed='counts'), "observed='counts'.*components='types'"),
    (dict(conv_cfg=dict(type='Conv2d')), 'conv_cfg'),
])
def test_bad_components_are_named(kwargs, match):
    with pytest.raises(ValueError, match=match):
        positions_caps(**kwargs)


@pytest.mark.parametrize('components', ['types', 'positions'])
def test_normalised_components_have_unit_root_mean_square(components):
    caps = positions_caps(components=components, component_norm=True)
    x = 50 * torch.randn(2, 16, 5, 6)
    with torch.no_grad():
        X_p = caps._components(x)[0]
        raw = positions_caps(components=components)._components(x)[0]
    rms = X_p.pow(2).mean(-1).sqrt()
    # Padding's components are zeros and stay zeros; the others have
    # root mean square 1 and the direction they had.
    padded = raw.abs().amax(-1) == 0
    assert torch.all(X_p[padded] == 0)
    torch.testing.assert_close(rms[~padded], torch.ones_like(rms[~padded]))
    torch.testing.assert_close(
        X_p, raw / raw.pow(2).mean(-1, keepdim=True).add(1e-6).sqrt())


def test_normalised_components_train_with_finite_gradients():
    caps = positions_caps(component_norm=True).train()
    x = torch.randn(2, 16, 5, 6, requires_grad=True)
    caps(x).square().sum().backward()
    assert torch.isfinite(x.grad).all() and x.grad.abs().sum() > 0
    assert torch.isfinite(caps.embed.weight.grad).all()
    assert 'component_norm=True' in repr(caps)


def test_component_norm_must_be_a_bool():
    with pytest.raises(ValueError, match='component_norm must be True or'):
        positions_caps(component_norm=1)
