"""The components' structures op: its C++ kernel against the torch
reference (the oracle), where each runs, and the capsule layer's inference
through it."""
import importlib

import pytest
import torch

from mmhgw.models import HGWCaps
from mmhgw.ops import (component_structures, component_structures_reference,
                       cpp_available)
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
def test_kernel_runs_only_where_no_gradient_is_needed(monkeypatch):
    calls = []
    real = structures_module._load_ext()

    class Spy:

        def hgw_structures_forward(self, **kwargs):
            calls.append(kwargs['X'].shape)
            return real.hgw_structures_forward(**kwargs)

    monkeypatch.setattr(structures_module, '_load_ext', lambda: Spy())
    X = components((3, ), 32, 8, torch.float32).requires_grad_()
    b = torch.tensor(0.5)
    C, row = component_structures(X, b)
    assert C.grad_fn is not None and not calls  # training: autograd path
    with torch.no_grad():
        component_structures(X, b)
        assert len(calls) == 1
        component_structures(X, b, backend='torch')  # the reference asked
        component_structures(X.half(), b.half())  # no kernel for 16 bits
        assert len(calls) == 1
    # Nothing requires a gradient: the kernel, with grad mode on.
    component_structures(X.detach(), b)
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
