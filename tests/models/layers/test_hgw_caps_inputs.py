"""HGWCaps refuses bad arguments at build time, naming them, and takes the
inputs nn.Conv2d takes: unbatched tensors and 16-bit dtypes."""
import copy

import pytest
import torch

import mmhgw  # noqa: F401
from mmhgw.models import HGWCaps

SMALL = dict(in_types=4, out_types=4, num_parts=3, part_dim=4)


def small_caps(**kwargs):
    args = dict(SMALL, kernel_size=3, padding=1)
    args.update(kwargs)
    torch.manual_seed(0)
    return HGWCaps(16, 8, **args)


@pytest.mark.parametrize('name,value', [
    ('num_parts', 0),
    ('part_dim', 0),
    ('in_types', 0),
    ('out_types', -1),
    ('num_parts', 2.5),
    ('part_dim', True),
    ('temperature', float('nan')),
    ('temperature', 0.0),
    ('temperature', float('inf')),
    ('reg_weight', -1.0),
    ('reg_weight', float('nan')),
    ('reg_weight', float('inf')),
    ('beta', float('nan')),
    ('pose_from', 'parts'),
])
def test_bad_arguments_fail_at_build_naming_the_argument(name, value):
    with pytest.raises(ValueError, match=name):
        small_caps(**{name: value})


@pytest.mark.parametrize('side', ['in_types', 'num_parts'])
def test_single_part_regulariser_is_finite(side):
    kw = {side: 1}
    caps = small_caps(**kw).train()
    x = torch.randn(2, 16, 5, 5, requires_grad=True)
    out, reg, _ = caps.forward_terms(x)
    assert reg is not None and torch.isfinite(reg)
    caps(x).pow(2).sum().backward()
    assert torch.isfinite(x.grad).all()
    for n, p in caps.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), n


def test_unbatched_input_as_conv2d():
    caps = small_caps().eval()
    conv = torch.nn.Conv2d(16, 8, 3, padding=1)
    x = torch.randn(16, 7, 6)
    with torch.no_grad():
        out = caps(x)
        assert out.shape == conv(x).shape == (8, 7, 6)
        torch.testing.assert_close(out, caps(x[None])[0])
    with pytest.raises(ValueError, match=r'\[B, 16, H, W\].*got \(7, 6\)'):
        caps(x[0])
    with pytest.raises(ValueError, match='got \\(2, 15, 7, 6\\)'):
        caps(torch.randn(2, 15, 7, 6))


@pytest.mark.parametrize('dtype', [torch.float16, torch.bfloat16])
@pytest.mark.parametrize('eps', [1e-3, 1e-4])
def test_16bit_module_solves_in_float32(dtype, eps):
    torch.manual_seed(0)
    ref = small_caps(eps=eps).eval()
    x = (torch.randn(2, 16, 6, 6) * 3).to(dtype)
    # The 16-bit module holds these very weights; float32 computation on
    # them is the reference.
    with torch.no_grad():
        for p in ref.parameters():
            p.copy_(p.to(dtype).float())
        expected = ref(x.float())
    low = copy.deepcopy(ref).to(dtype)
    assert low.subcapsules.dtype == torch.float32
    assert low.embed.weight.dtype == torch.float32
    with torch.no_grad():
        out = low(x)
    assert out.dtype == dtype
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out, expected.to(dtype))


def test_16bit_module_trains():
    caps = small_caps().train().half()
    x = torch.randn(2, 16, 5, 5, dtype=torch.float16, requires_grad=True)
    out = caps(x)
    assert out.dtype == torch.float16
    out.float().pow(2).sum().backward()
    assert x.grad.dtype == torch.float16 and torch.isfinite(x.grad).all()
    assert caps.subcapsules.grad.dtype == torch.float32


def test_autocast_does_not_reach_the_solver():
    torch.manual_seed(0)
    caps = small_caps().eval()
    x = torch.randn(2, 16, 6, 6)
    with torch.no_grad():
        expected = caps(x)
        with torch.autocast('cpu', dtype=torch.bfloat16):
            out = caps(x)
    assert out.dtype == torch.float32
    torch.testing.assert_close(out, expected)


@pytest.mark.parametrize('eps', [1e-300, 1e-20])
def test_eps_below_the_float32_bound_fails_at_build(eps):
    """The bound shared by the solver and the op, checked when the layer is
    built (1e-300 used to give NaN in every output and gradient)."""
    with pytest.raises(ValueError, match=r'eps must be a finite number >= '
                       r'1\.08e-19'):
        small_caps(eps=eps)


@pytest.mark.parametrize('routing', ['hgw', 'uniform'])
@pytest.mark.parametrize('scale', [1e19, 1e30])
def test_large_inputs_give_a_finite_output_as_conv2d(routing, scale):
    """Inputs whose squared embeddings overflow float32: the output stays
    finite where nn.Conv2d's does, in eval and in training."""
    caps = small_caps(routing=routing)
    conv = torch.nn.Conv2d(16, 8, 3, padding=1)
    x = torch.randn(2, 16, 5, 6) * scale
    for training in (False, True):
        caps.train(training)
        assert torch.isfinite(conv(x)).all()
        assert torch.isfinite(caps(x)).all()


@pytest.mark.parametrize('backend', ['torch', 'auto'])
def test_second_order_gradients_are_refused_naming_the_op(backend):
    """Double backward through the layer used to drop the routing op's
    term (about 99% of the second-order gradient) without an error; the
    structures kernels (on the CPU with the C++ backend) refuse it too."""
    caps = small_caps(backend=backend)
    x = torch.randn(1, 16, 4, 4, requires_grad=True)
    (grad, ) = torch.autograd.grad(
        caps(x).square().sum(), x, create_graph=True)
    with pytest.raises(
            RuntimeError, match=r'mmhgw::hgw_(routing|structures) is once '
            'differentiable'):
        grad.square().sum().backward()
