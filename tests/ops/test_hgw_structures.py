"""The components' structures op: its C++ kernels (values and gradients)
against the torch reference (the oracle), where each runs, and the capsule
layer through them."""
import importlib

import pytest
import torch

from mmhgw.models import HGWCaps
from mmhgw.ops import (component_structures, component_structures_reference,
                       component_terms, cpp_available)
from mmhgw.ot import (bound_distance, mix_structure, power_of_two_scale,
                      source_factors, zipf_structure)

structures_module = importlib.import_module('mmhgw.ops.hgw_structures')

needs_ext = pytest.mark.skipif(not cpp_available(),
                               reason='the C++ extension is not built')

#: (lead dims, V, d): the layer's 32 x 8, and odd sizes.
SHAPES = [((2, 7), 32, 8), ((5, ), 5, 3), ((3, ), 1, 4)]
TOLERANCE = {torch.float32: 2e-6, torch.float64: 1e-12}


def components(lead, V, d, dtype, scale=1.0, seed=0):
    g = torch.Generator().manual_seed(seed)
    # Components of mixed sizes, as trained layers have (some absent).
    size = torch.rand(*lead, V, 1, generator=g, dtype=torch.float64) * 2
    X = torch.randn(*lead, V, d, generator=g, dtype=torch.float64) * size
    return (X * scale).to(dtype)


def assert_close(got, want, dtype):
    tol = TOLERANCE[dtype]
    for a, b in zip(got, want):
        assert a.shape == b.shape and a.dtype == b.dtype
        torch.testing.assert_close(a, b, rtol=tol, atol=tol)


@needs_ext
@pytest.mark.parametrize('dtype', [torch.float32, torch.float64])
@pytest.mark.parametrize('lead, V, d', SHAPES)
@pytest.mark.parametrize('observed', ['coactivation', 'given', 'none'])
@pytest.mark.parametrize('beta', [0.0, 0.5, 1.0])
def test_kernel_matches_reference(dtype, lead, V, d, observed, beta):
    X = components(lead, V, d, dtype)
    b = torch.tensor(beta, dtype=dtype)
    obs = None
    if observed == 'given':
        obs = 1 / (1 + torch.rand(*lead, V, V, dtype=dtype) * 9)
    use_observed = observed != 'none'
    with torch.no_grad():
        got = component_structures(X, b, obs, use_observed)
    want = component_structures_reference(X, b, obs, use_observed)
    assert_close(got, want, dtype)


def exact_structures(X, beta):
    """The reference's structures in float64 with the squared distances
    summed from differences: the reference's expansion
    ``|x|^2 + |y|^2 - 2 x.y`` rounds at the scale of ``|x|^2``, which at
    large components leaves noise on K's diagonal (exactly the floor)."""
    X = X.double()
    a = power_of_two_scale(X)
    Xs = X / a
    sq = (Xs.unsqueeze(-2) - Xs.unsqueeze(-3)).pow(2).sum(-1) * a * a
    K = bound_distance(sq, X.shape[-1])
    C = mix_structure(zipf_structure(X), K, beta.double())
    p = X.new_full((X.shape[-2], ), 1.0 / X.shape[-2])
    return C, source_factors(C, p)[0]


@needs_ext
@pytest.mark.parametrize('dtype', [torch.float32, torch.float64])
@pytest.mark.parametrize('scale', [1e-20, 1, 1e3, 1e30])
def test_kernel_matches_exact_structures_at_any_size(dtype, scale):
    # Squares that underflow, that dwarf the floor, that overflow float32:
    # the power-of-two scaling keeps the distances finite.
    X = components((4, ), 32, 8, dtype, scale=scale)
    b = torch.tensor(0.5, dtype=dtype)
    with torch.no_grad():
        got = component_structures(X, b)
    assert all(t.isfinite().all() for t in got)
    for a, w in zip(got, exact_structures(X, b)):
        torch.testing.assert_close(a.double(), w, rtol=2e-6, atol=2e-6)


@needs_ext
def test_kernels_run_where_backend_and_arguments_allow(monkeypatch):
    calls = []
    real = structures_module._load_ext()

    class Spy:

        def hgw_structures_forward(self, **kwargs):
            calls.append(kwargs['X'].shape)
            return real.hgw_structures_forward(**kwargs)

        def hgw_structures_backward(self, **kwargs):
            return real.hgw_structures_backward(**kwargs)

    monkeypatch.setattr(structures_module, '_load_ext', lambda: Spy())
    X = components((3, ), 32, 8, torch.float32).requires_grad_()
    b = torch.tensor(0.5)
    obs = 1 / (1 + torch.rand(3, 32, 32))
    C, row = component_structures(X, b)  # training: the kernels' gradient
    assert C.grad_fn is not None and len(calls) == 1
    # A given observed structure has no backward kernel: the composition.
    C, row = component_structures(X, b, obs)
    assert C.grad_fn is not None and len(calls) == 1
    with torch.no_grad():
        component_structures(X, b, obs)
        assert len(calls) == 2
        component_structures(X, b, backend='torch')  # the reference asked
        component_structures(X.half(), b.half())  # no kernel for 16 bits
        assert len(calls) == 2


@pytest.mark.parametrize('layer_args', [
    dict(),
    dict(observed='counts'),
    dict(use_observed=False),
    dict(routing='uniform')
])
def test_layer_inference_equals_its_differentiable_path(layer_args):
    # Inference (the kernel, when built) and the autograd path give the
    # same output.
    torch.manual_seed(0)
    layer = HGWCaps(32, 32, 3, padding=1, in_types=8, out_types=4,
                    **layer_args).eval()
    x = torch.randn(2, 32, 6, 5)
    with torch.no_grad():
        inferred = layer(x)
    differentiable = layer(x.clone().requires_grad_())
    assert differentiable.grad_fn is not None
    # Structures that differ in their last bits (the kernel's distances
    # are summed differences) move the near-hard plans and the activation
    # (temperature 0.1) by a little more.
    torch.testing.assert_close(inferred, differentiable.detach(), rtol=1e-4,
                               atol=1e-4)


def test_layer_trace_records_the_reference():
    # A trace holds ops it can replay, not the kernel's call.
    torch.manual_seed(0)
    layer = HGWCaps(16, 16, 3, padding=1, in_types=4, out_types=4).eval()
    x = torch.randn(1, 16, 5, 5)
    with torch.no_grad():
        traced = torch.jit.trace(layer, x, check_trace=False)
        y = torch.randn(1, 16, 5, 5)
        torch.testing.assert_close(traced(y), layer(y), rtol=1e-5, atol=1e-6)


@needs_ext
@pytest.mark.parametrize('dtype', [torch.float64, torch.float32])
@pytest.mark.parametrize('lead, V, d', SHAPES)
@pytest.mark.parametrize('use_observed', [True, False])
@pytest.mark.parametrize('beta', [0.0, 0.5, 1.0])
def test_kernel_gradients_match_reference(dtype, lead, V, d, use_observed,
                                          beta):
    """C_p, the row factor and the regulariser's term, and their gradients
    with respect to the components and beta, against the composition."""
    X = components(lead, V, d, dtype).requires_grad_()
    b = torch.tensor(beta, dtype=dtype, requires_grad=True)
    got = component_terms(X, b, None, use_observed)
    want = component_terms(X, b, None, use_observed, backend='torch')
    assert got[0].grad_fn is not None
    g = torch.Generator().manual_seed(1)
    upstream = [torch.randn(t.shape, generator=g, dtype=dtype) for t in want]
    # With V = 1 the regulariser's term is a constant 0.
    used = [i for i, t in enumerate(want) if t.requires_grad]
    assert len(used) == (2 if V == 1 else 3)
    grads = torch.autograd.grad([got[i] for i in used], (X, b),
                                [upstream[i] for i in used])
    # Without observed structure beta does not enter: no gradient (0).
    grads_want = [
        torch.zeros_like(x) if w is None else w
        for x, w in zip((X, b),
                        torch.autograd.grad([want[i] for i in used], (
                            X, b), [upstream[i]
                                    for i in used], allow_unused=True))
    ]
    tol = dict(rtol=TOLERANCE[dtype] * 10, atol=TOLERANCE[dtype] * 10)
    for a, w in zip((*got, *grads), (*want, *grads_want)):
        torch.testing.assert_close(a, w, **tol)


@needs_ext
def test_kernel_gradient_of_one_output_alone():
    """Outputs that get no gradient (the row factor, E) count as zero."""
    X = components((3, ), 32, 8, torch.float64).requires_grad_()
    b = torch.tensor(0.5, dtype=torch.float64)
    for pick in range(3):
        got = component_terms(X, b)[pick].sum()
        want = component_terms(X, b, backend='torch')[pick].sum()
        torch.testing.assert_close(
            torch.autograd.grad(got, X)[0],
            torch.autograd.grad(want, X)[0], rtol=1e-10, atol=1e-12)


@needs_ext
@pytest.mark.parametrize('scale', [1e-20, 1e30])
def test_kernel_gradient_is_finite_at_any_size(scale):
    X = components((4, ), 32, 8, torch.float32, scale=scale).requires_grad_()
    b = torch.tensor(0.5, requires_grad=True)
    out = component_terms(X, b)
    grads = torch.autograd.grad(sum(t.sum() for t in out), (X, b))
    assert all(t.isfinite().all() for t in (*out, *grads))


@needs_ext
def test_kernel_refuses_second_order_gradients_naming_the_op():
    X = components((3, ), 32, 8, torch.float64).requires_grad_()
    b = torch.tensor(0.5, dtype=torch.float64)
    C_p, row, kl = component_terms(X, b)
    (grad, ) = torch.autograd.grad(C_p.square().sum() + kl, X,
                                   create_graph=True)
    with pytest.raises(RuntimeError,
                       match='mmhgw::hgw_structures is once differentiable'):
        grad.square().sum().backward()
