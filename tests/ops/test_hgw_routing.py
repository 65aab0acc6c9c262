"""The fused HGW routing op against its torch reference (the oracle)."""
import importlib
import math
import os
import warnings

import pytest
import torch

from mmhgw.benchmarking import random_routing_inputs
from mmhgw.ops import (cpp_available, cross_cost, hgw_routing,
                       hgw_routing_reference, triton_available)
from mmhgw.ot import MIN_EPS

# The module, not the function of the same name that mmhgw.ops exports.
routing_module = importlib.import_module('mmhgw.ops.hgw_routing')

#: (M, N, V_p, V_q, d): odd sizes (the generic loops), and the layer's
#: shapes (V_q = 8 with V_p = 16 / 32: the SIMD path, its backward with
#: d = 8; numbers of types that fill an 8- or 16-lane group in part, or
#: leave a tail after a full one; d = 5).
SIZES = [(5, 3, 7, 5, 3), (3, 4, 16, 8, 8), (2, 5, 32, 8, 8), (2, 3, 32, 8, 5),
         (1, 6, 16, 8, 8), (1, 10, 16, 8, 8), (2, 19, 32, 8, 8)]


def make_inputs(M, N, V_p, V_q, d, dtype, seed=0):
    """Layer-like inputs (:func:`mmhgw.benchmarking.random_routing_inputs`)
    that require gradients."""
    return [
        t.requires_grad_()
        for t in random_routing_inputs(M, N, V_p, V_q, d, dtype, seed)
    ]


def relative(a, b):
    return ((a - b).norm() / b.norm().clamp_min(1e-30)).item()


def saved_for_backward(func):
    """``(func(), sizes of the tensors autograd saved while it ran)``."""
    saved = []

    def pack(t):
        saved.append(t.numel())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        return func(), saved


def fused_backends():
    backends = ['torch']
    if cpp_available():
        backends.append('cpp')
    return backends


def test_cpp_extension_is_built():
    """The set-up builds the extension; without it every CPU run falls back
    to the torch reference, several times slower."""
    if os.environ.get('MMHGW_NO_EXT') == '1':
        pytest.skip('built without the extension on purpose')
    assert cpp_available(), routing_module._ext_error


@pytest.mark.parametrize('backend', fused_backends())
@pytest.mark.parametrize('dtype', [torch.float64, torch.float32])
@pytest.mark.parametrize('size', SIZES)
@pytest.mark.parametrize('eps,routing,regularizer',
                         [(1e-3, 'hgw', 'proximal'), (1e-2, 'hgw', 'proximal'),
                          (1e-1, 'hgw', 'entropic'),
                          (1e-3, 'uniform', 'proximal')])
def test_backend_equals_reference(backend, dtype, size, eps, routing,
                                  regularizer):
    inputs = make_inputs(*size, dtype)
    options = dict(eps=eps, outer_iters=3, inner_iters=4,
                   regularizer=regularizer, routing=routing)
    dist_ref, parts_ref = hgw_routing_reference(*inputs, **options)
    gd, gp = torch.randn_like(dist_ref), torch.randn_like(parts_ref)
    grads_ref = torch.autograd.grad((dist_ref, parts_ref), inputs, (gd, gp))
    dist, parts = hgw_routing(*inputs, backend=backend, **options)
    grads = torch.autograd.grad((dist, parts), inputs, (gd, gp))
    assert relative(dist, dist_ref) < 1e-5
    assert relative(parts, parts_ref) < 1e-5
    names = ['X_p', 'X_q', 'h1', 'h2', 'row', 'col', 'beta']
    for name, g, g_ref in zip(names, grads, grads_ref):
        assert relative(g, g_ref) < 1e-4, name


@pytest.mark.parametrize('backend', fused_backends())
def test_leading_dims_and_only_one_output_used(backend):
    inputs = make_inputs(6, 3, 7, 5, 3, torch.float64)
    X_p, X_q, h1, h2, row, col, beta = inputs
    options = dict(eps=1e-2, outer_iters=2, inner_iters=3)
    dist, parts = hgw_routing(X_p.view(2, 3, 7, 3), X_q, h1.view(2, 3, 7,
                                                                 7), h2,
                              row.view(2, 3, 7), col, beta, backend=backend,
                              **options)
    assert dist.shape == (2, 3, 3) and parts.shape == (2, 3, 3, 5, 3)
    flat_dist, flat_parts = hgw_routing_reference(*inputs, **options)
    torch.testing.assert_close(dist.reshape(6, 3), flat_dist)
    # Only the distances reach the loss: the parts' gradient is None.
    (g_fused, ) = torch.autograd.grad(dist.sum(), [X_q])
    (g_ref, ) = torch.autograd.grad(flat_dist.sum(), [X_q])
    torch.testing.assert_close(g_fused, g_ref)


@pytest.mark.parametrize('backend', fused_backends())
def test_backward_keeps_nothing_plan_sized(backend):
    M, N, V_p, V_q, d = 40, 32, 16, 8, 8
    inputs = make_inputs(M, N, V_p, V_q, d, torch.float32)
    (dist, parts), saved = saved_for_backward(lambda: hgw_routing(
        *inputs, eps=1e-3, outer_iters=2, inner_iters=3, backend=backend))
    # The largest saved tensor is an input: h1 [M, V_p, V_p] (a plan is
    # M N V_p V_q = 8x larger here).
    assert max(saved) == M * V_p * V_p
    (dist.sum() + parts.square().sum()).backward()
    assert all(torch.isfinite(t.grad).all() for t in inputs)


@pytest.mark.parametrize('backend', fused_backends())
def test_components_given_as_a_view_are_kept_without_a_copy(backend):
    """The layer's components are a permuted view of its embedding
    [B, V_p * d, H, W]: the op keeps that storage for backward, not a
    contiguous copy of it, and its gradient still reaches the embedding."""
    B, V_p, d, H, W, N, V_q = 2, 16, 4, 3, 5, 6, 8
    g = torch.Generator().manual_seed(0)
    embedding = torch.randn(B, V_p * d, H, W, generator=g, requires_grad=True)
    X_p = embedding.view(B, V_p, d, H * W).permute(0, 3, 1, 2)
    _, X_q, h1, h2, row, col, beta = make_inputs(B * H * W, N, V_p, V_q, d,
                                                 torch.float32)
    h1, row = h1.view(B, H * W, V_p, V_p), row.view(B, H * W, V_p)
    options = dict(eps=1e-2, outer_iters=2, inner_iters=3, backend=backend)
    storages = []

    def pack(t):
        storages.append(t.untyped_storage().data_ptr())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        dist, parts = hgw_routing(X_p, X_q, h1, h2, row, col, beta, **options)
    assert embedding.untyped_storage().data_ptr() in storages
    assert len(storages) == len(set(storages))  # no second X_p copy
    (dist.sum() + parts.square().sum()).backward()
    flat = embedding.detach().view(B, V_p, d, H * W).permute(0, 3, 1, 2)
    flat = flat.reshape(-1, V_p, d).requires_grad_()
    ref = hgw_routing_reference(
        flat, X_q, h1.reshape(-1, V_p, V_p), h2, row.reshape(-1, V_p), col,
        beta, **{k: v
                 for k, v in options.items() if k != 'backend'})
    (ref[0].sum() + ref[1].square().sum()).backward()
    expected = flat.grad.view(B, H * W, V_p, d).permute(0, 2, 3, 1)
    assert relative(embedding.grad, expected.reshape(embedding.shape)) < 1e-4


@pytest.mark.skipif(not cpp_available(), reason='C++ extension not built')
def test_cpp_plans_give_the_reference_parts():
    """The plans binding (convergence studies) returns each (location, type)
    plan in its place, also where types are solved many at a time."""
    M, N, V_p, V_q, d = 2, 19, 32, 8, 8
    inputs = [
        t.detach() for t in make_inputs(M, N, V_p, V_q, d, torch.float32)
    ]
    X_p, X_q, h1, h2, row, col, beta = inputs
    T = routing_module._load_ext().hgw_routing_plans(X_p, X_q, h1, h2, row,
                                                     col, 0.5, 1e-2, 3, 4,
                                                     True, False, True)
    assert T.shape == (M, N, V_p, V_q)
    _, parts_ref = hgw_routing_reference(*inputs, eps=1e-2, outer_iters=3,
                                         inner_iters=4)
    parts = V_q * torch.einsum('mnij,mid->mnjd', T, X_p)
    assert relative(parts, parts_ref) < 1e-5


@pytest.mark.parametrize('backend', fused_backends())
@pytest.mark.parametrize('dtype', [torch.float64, torch.float32])
def test_pose_map_equals_the_map_of_the_reference_parts(backend, dtype):
    inputs = make_inputs(3, 5, 32, 8, 8, dtype)
    g = torch.Generator().manual_seed(3)
    weight = torch.randn(5, 64, 6, generator=g, dtype=dtype).requires_grad_()
    options = dict(eps=1e-2, outer_iters=3, inner_iters=4)
    dist, parts = hgw_routing_reference(*inputs, **options)
    ref = (dist, torch.einsum('mnk,nko->mno', parts.flatten(-2), weight))
    upstream = [torch.randn(t.shape, generator=g, dtype=dtype) for t in ref]
    grads_ref = torch.autograd.grad(ref, [*inputs, weight], upstream)
    out = hgw_routing(*inputs, backend=backend, pose_weight=weight, **options)
    assert out[1].shape == (3, 5, 6)
    grads = torch.autograd.grad(out, [*inputs, weight], upstream)
    assert relative(out[0], ref[0]) < 1e-5
    assert relative(out[1], ref[1]) < 1e-5
    names = ['X_p', 'X_q', 'h1', 'h2', 'row', 'col', 'beta', 'pose_weight']
    for name, grad, grad_ref in zip(names, grads, grads_ref):
        assert relative(grad, grad_ref) < 1e-4, name


@pytest.mark.parametrize('backend', fused_backends())
def test_pose_map_keeps_no_parts_for_backward(backend):
    M, N, V_p, V_q, d, O = 40, 32, 16, 8, 8, 4
    inputs = make_inputs(M, N, V_p, V_q, d, torch.float32)
    weight = torch.randn(N, V_q * d, O).requires_grad_()
    (dist, pose), saved = saved_for_backward(
        lambda: hgw_routing(*inputs, eps=1e-2, outer_iters=2, inner_iters=3,
                            backend=backend, pose_weight=weight))
    # The inputs only: h1 [M, V_p, V_p] is the largest; the parts would be
    # M N V_q d, 16x that.
    assert max(saved) == M * V_p * V_p
    (dist.sum() + pose.square().sum()).backward()
    assert torch.isfinite(weight.grad).all() and weight.grad.abs().sum() > 0


def test_pose_weight_of_the_wrong_shape_is_named():
    inputs = make_inputs(2, 3, 5, 4, 2, torch.float64)
    with pytest.raises(
            ValueError, match=r'pose_weight must have shape '
            r'\(N, V_q \* d, O\) = \(3, 8, O\)'):
        hgw_routing(*inputs, outer_iters=1, inner_iters=1,
                    pose_weight=torch.zeros(3, 6, 2, dtype=torch.float64))


def test_auto_falls_back_to_torch_with_one_warning(monkeypatch):
    monkeypatch.setattr(routing_module, '_ext', None)
    monkeypatch.setattr(routing_module, '_ext_error', 'not built (test)')
    monkeypatch.setattr(routing_module, '_warned_fallback', False)
    inputs = make_inputs(3, 2, 5, 4, 3, torch.float64)
    with pytest.warns(UserWarning, match='falls back to the torch reference'):
        first = hgw_routing(*inputs, outer_iters=2, inner_iters=2)
    with warnings.catch_warnings():
        warnings.simplefilter('error')
        second = hgw_routing(*inputs, outer_iters=2, inner_iters=2)
    torch.testing.assert_close(first, second)
    with pytest.raises(RuntimeError, match='not built'):
        hgw_routing(*inputs, outer_iters=2, inner_iters=2, backend='cpp')


@pytest.mark.parametrize('dtype', [torch.float16, torch.bfloat16])
def test_16_bit_inputs_are_solved_in_float32(dtype):
    inputs = [t.detach() for t in make_inputs(4, 3, 7, 5, 3, torch.float32)]
    options = dict(eps=1e-3, outer_iters=3, inner_iters=5)
    low = [t.to(dtype) for t in inputs]
    dist, parts = hgw_routing(*low, **options)
    assert dist.dtype == dtype and parts.dtype == dtype
    ref, _ = hgw_routing_reference(*[t.float() for t in low], **options)
    torch.testing.assert_close(dist.float(), ref, rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize('change,match', [
    (dict(h1=torch.ones(3, 5, 4)), 'h1 must have shape'),
    (dict(row=torch.ones(2, 5)), 'row must have shape'),
    (dict(col=torch.ones(2, 3)), 'col must have shape'),
    (dict(X_q=torch.ones(2, 4, 2)), 'X_q must have shape'),
    (dict(beta=torch.ones(2)), 'beta must be a number'),
])
def test_bad_shapes_name_the_argument(change, match):
    names = ['X_p', 'X_q', 'h1', 'h2', 'row', 'col', 'beta']
    args = dict(zip(names, make_inputs(3, 2, 5, 4, 3, torch.float32)))
    args.update(change)
    with pytest.raises(ValueError, match=match):
        hgw_routing(*args.values(), outer_iters=1, inner_iters=1)


@pytest.mark.parametrize('kwargs,match', [
    (dict(backend='cuda'), 'backend must be one of'),
    (dict(routing='dynamic'), 'routing must be one of'),
    (dict(eps=0.0), 'eps must be'),
    (dict(outer_iters=0), 'outer_iters must be'),
])
def test_bad_options_raise(kwargs, match):
    options = dict(outer_iters=1, inner_iters=1)
    options.update(kwargs)
    with pytest.raises(ValueError, match=match):
        hgw_routing(*make_inputs(3, 2, 5, 4, 3, torch.float32), **options)


def test_explicit_triton_backend_without_cuda_raises():
    if triton_available() and torch.cuda.is_available():
        pytest.skip('CUDA present')
    inputs = make_inputs(3, 2, 5, 4, 3, torch.float32)
    with pytest.raises((RuntimeError, ValueError), match='triton'):
        with pytest.MonkeyPatch.context() as mp:
            mp.delenv('TRITON_INTERPRET', raising=False)
            hgw_routing(*inputs, outer_iters=1, inner_iters=1,
                        backend='triton')


def test_tracing_records_the_fused_op():
    """A traced graph holds the op as one node (it runs the fused kernels,
    and FLOP counting hooks it by name), not a Python autograd Function."""
    inputs = [t.detach() for t in make_inputs(3, 2, 5, 4, 3, torch.float64)]

    def f(*args):
        return hgw_routing(*args, outer_iters=2, inner_iters=2)

    traced = torch.jit.trace(f, tuple(inputs), check_trace=False)
    kinds = {node.kind() for node in traced.graph.nodes()}
    assert 'mmhgw::hgw_routing' in kinds and 'prim::PythonOp' not in kinds
    assert 'aten::exp' not in kinds  # the reference's operations are not
    torch.testing.assert_close(traced(*inputs), f(*inputs))


NAMES = ['X_p', 'X_q', 'h1', 'h2', 'row', 'col', 'beta']

#: (input, index, value): one non-finite entry, at a location or type in
#: the middle, so that other problems stay finite.
POISONS = [('X_p', (1, 2, 0), math.nan), ('X_p', (1, 0, 1), math.inf),
           ('X_q', (1, 1, 0), -math.inf), ('h1', (0, 1, 1), math.nan),
           ('h2', (1, 0, 0), math.inf), ('row', (2, 0), math.nan),
           ('col', (0, 1), -math.inf), ('beta', (), math.nan)]


def poisoned_inputs(size, dtype, name, index, value):
    inputs = [t.detach() for t in make_inputs(*size, dtype)]
    inputs[NAMES.index(name)][index] = value
    return [t.requires_grad_() for t in inputs]


def nan_where_the_reference_has_nan(backend, inputs, **options):
    """``[(name, NaN masks equal, finite entries close)]`` for the op's
    outputs and gradients against the reference's (close: as
    :func:`test_backend_equals_reference` asks of gradients)."""
    ref = hgw_routing_reference(*inputs, **options)
    g = torch.Generator().manual_seed(1)
    upstream = [torch.randn(t.shape, generator=g, dtype=t.dtype) for t in ref]
    grads_ref = torch.autograd.grad(ref, inputs, upstream)
    out = hgw_routing(*inputs, backend=backend, **options)
    grads = torch.autograd.grad(out, inputs, upstream)
    results = []
    for name, a, b in zip(['dist', 'parts'] + NAMES, (*out, *grads),
                          (*ref, *grads_ref)):
        finite = ~b.isnan()
        results.append((name, torch.equal(a.isnan(), b.isnan()),
                        relative(a[finite], b[finite]) < 1e-4))
    return ref, results


@pytest.mark.parametrize('backend', fused_backends())
@pytest.mark.parametrize('dtype', [torch.float64, torch.float32])
@pytest.mark.parametrize('size', [(5, 3, 7, 5, 3), (3, 4, 16, 8, 8)])
@pytest.mark.parametrize('poison', POISONS, ids=lambda p: f'{p[0]}-{p[2]}')
def test_non_finite_inputs_give_nan_where_the_reference_does(
        backend, dtype, size, poison):
    """A NaN or infinite input makes its problems' outputs and gradients
    NaN, and only those (the SIMD size also puts a poisoned and a finite
    type side by side in one vector)."""
    inputs = poisoned_inputs(size, dtype, *poison)
    ref, results = nan_where_the_reference_has_nan(backend, inputs, eps=1e-2,
                                                   outer_iters=2,
                                                   inner_iters=3)
    # Some problems are poisoned, and (but with beta) not all.
    assert ref[0].isnan().any()
    assert poison[0] == 'beta' or not ref[0].isnan().all()
    for name, same_nan, close in results:
        assert same_nan and close, name


@pytest.mark.parametrize('backend', fused_backends())
def test_non_finite_inputs_with_the_pose_map_and_uniform_routing(backend):
    """Uniform routing solves nothing, yet a poisoned problem is NaN too;
    the pose map carries the NaN to the poses only of those problems."""
    inputs = poisoned_inputs((4, 3, 16, 8, 8), torch.float32, 'X_q', (1, 0, 0),
                             math.nan)
    weight = torch.randn(3, 64, 5)
    for routing in ('hgw', 'uniform'):
        dist, pose = hgw_routing(*inputs, eps=1e-2, outer_iters=2,
                                 inner_iters=2, routing=routing,
                                 backend=backend, pose_weight=weight)
        expected = torch.zeros(4, 3, dtype=torch.bool)
        expected[:, 1] = True
        assert torch.equal(dist.isnan(), expected)
        assert torch.equal(pose.isnan().all(-1), expected)
        assert not pose[~expected].isnan().any()


@pytest.mark.parametrize('backend', fused_backends())
@pytest.mark.parametrize('scale', [1e19, 1e30])
def test_large_embeddings_give_finite_outputs(backend, scale):
    """Embeddings whose squares overflow float32 (as a convolution's input
    may be) give the distances and parts of the float64 reference, where
    nothing overflows."""
    inputs = [t.detach() for t in make_inputs(3, 4, 16, 8, 8, torch.float64)]
    inputs[0] = inputs[0] * scale
    inputs[1] = inputs[1] * (scale / 2)
    options = dict(eps=1e-2, outer_iters=2, inner_iters=3)
    ref = hgw_routing_reference(*inputs, **options)
    single = [t.float().requires_grad_() for t in inputs]
    out = hgw_routing(*single, backend=backend, **options)
    for a, b in zip(out, ref):
        assert torch.isfinite(a).all()
        assert relative(a.double(), b) < 1e-5
    grads = torch.autograd.grad(out[0].sum(), single)
    assert all(torch.isfinite(g).all() for g in grads)


def far_part_inputs():
    """float64 inputs (3 locations, 12 types, 32 x 8) in which two parts lie
    far from every component (cross cost 1 against ~0.9 for the others)."""
    inputs = [t.detach() for t in make_inputs(3, 12, 32, 8, 8, torch.float64)]
    inputs[1][1, 3] = 30.0
    inputs[1][2, 0] = -30.0
    return inputs


@pytest.mark.parametrize('backend', fused_backends())
@pytest.mark.parametrize('eps', [1e-3, 1e-2])
def test_part_far_from_every_component(backend, eps):
    """A part whose cross cost exceeds every other by far more than the
    exp floor times eps: its column of the shifted kernel underflows in
    every row, and the column update must still weigh its entries by
    their costs (as the log domain does) rather than by their floors."""
    inputs = far_part_inputs()
    options = dict(eps=eps, outer_iters=3, inner_iters=10)
    ref = hgw_routing_reference(*inputs, **options)
    single = [t.float().requires_grad_() for t in inputs]
    out = hgw_routing(*single, backend=backend, **options)
    for a, b in zip(out, ref):
        assert relative(a.double(), b) < 1e-5


def test_cross_cost_equals_the_plain_expansion_bit_for_bit():
    """The scaling is by powers of two: wherever the plain expansion does
    not overflow it is reproduced exactly."""
    X_p, X_q = make_inputs(4, 3, 16, 8, 8, torch.float32)[:2]
    for factor in (1.0, 1e3, 1e15):
        a, b = X_p.detach() * factor, X_q.detach() * factor
        dot = (a.reshape(-1, 8) @ b.reshape(-1, 8).T).view(4, 16, 3,
                                                           8).transpose(1, 2)
        sq = (a.pow(2).sum(-1).view(4, 1, 16, 1) +
              b.pow(2).sum(-1).view(1, 3, 1, 8) - 2 * dot)
        plain = -torch.expm1(-sq.clamp_min(0) / 8)
        assert torch.equal(cross_cost(a, b), plain)


@pytest.mark.parametrize('eps', [1e-300, 1e-20, 0.0, -1.0, math.nan, math.inf])
def test_eps_below_the_float32_bound_is_refused(eps):
    with pytest.raises(ValueError, match=r'eps must be a finite number >= '
                       r'1\.08e-19'):
        hgw_routing(*make_inputs(3, 2, 5, 4, 3, torch.float32), eps=eps,
                    outer_iters=1, inner_iters=1)


@pytest.mark.parametrize('backend', fused_backends())
def test_eps_at_the_bound_stays_finite_in_float32(backend):
    inputs = make_inputs(3, 4, 16, 8, 8, torch.float32)
    out = hgw_routing(*inputs, eps=MIN_EPS, outer_iters=5, inner_iters=3,
                      backend=backend)
    grads = torch.autograd.grad(out[0].sum() + out[1].sum(), inputs)
    assert all(torch.isfinite(t).all() for t in (*out, *grads))


@pytest.mark.parametrize('backend', fused_backends())
@pytest.mark.parametrize('with_pose_map', [False, True])
def test_double_backward_raises_naming_the_op(backend, with_pose_map):
    """The backward is the envelope gradient at a re-solved plan, with no
    gradient of its own: a second-order gradient is refused, not silently
    computed without the op's term."""
    inputs = make_inputs(3, 2, 16, 8, 4, torch.float32)
    weight = torch.randn(2, 32, 3, requires_grad=True)
    dist, out = hgw_routing(*inputs, eps=1e-2, outer_iters=2, inner_iters=2,
                            backend=backend,
                            pose_weight=weight if with_pose_map else None)
    (grad, ) = torch.autograd.grad(dist.sum() + out.square().sum(), inputs[0],
                                   create_graph=True)
    with pytest.raises(RuntimeError, match='mmhgw::hgw_routing is once '
                       'differentiable'):
        grad.square().sum().backward()


@pytest.mark.parametrize('pose_map,distance_only', [(False, False),
                                                    (True, False),
                                                    (True, True)])
def test_opcheck(pose_map, distance_only):
    """torch.library's checks of the custom op: schema, fake kernel,
    autograd registration, and AOT dispatch (torch.compile's path)."""
    inputs = make_inputs(3, 2, 5, 4, 3, torch.float64)
    weight = (torch.randn(2, 12, 3, dtype=torch.float64, requires_grad=True)
              if pose_map else None)
    args = (*inputs, weight, 1e-2, 2, 2, 'proximal', 'hgw', 'auto',
            distance_only)
    torch.library.opcheck(torch.ops.mmhgw.hgw_routing.default, args)


@pytest.mark.parametrize('backend', fused_backends())
@pytest.mark.parametrize('dtype', [torch.float64, torch.float32])
@pytest.mark.parametrize('size', SIZES)
@pytest.mark.parametrize('routing', ['hgw', 'uniform'])
def test_distance_only_equals_the_reference_distances(backend, dtype, size,
                                                      routing):
    """``distance_only=True``: the reference's distances and their
    gradients, no second output (a pose map passed along is ignored)."""
    inputs = make_inputs(*size, dtype)
    options = dict(eps=1e-2, outer_iters=3, inner_iters=4, routing=routing)
    dist_ref, _ = hgw_routing_reference(*inputs, **options)
    gd = torch.randn_like(dist_ref)
    grads_ref = torch.autograd.grad(dist_ref, inputs, gd)
    weight = torch.randn(size[1], size[3] * size[4], 3, dtype=dtype,
                         requires_grad=True)
    dist, out = hgw_routing(*inputs, backend=backend, distance_only=True,
                            pose_weight=weight, **options)
    assert out is None
    assert relative(dist, dist_ref) < 1e-5
    grads = torch.autograd.grad(dist, inputs + [weight], gd, allow_unused=True)
    names = ['X_p', 'X_q', 'h1', 'h2', 'row', 'col', 'beta']
    for name, g, g_ref in zip(names, grads, grads_ref):
        assert relative(g, g_ref) < 1e-4, name
    assert grads[-1] is None


@pytest.mark.parametrize('backend', fused_backends())
def test_distance_only_keeps_nothing_but_inputs(backend):
    M, N, V_p, V_q, d = 40, 32, 16, 8, 8
    inputs = make_inputs(M, N, V_p, V_q, d, torch.float32)
    (dist, out), saved = saved_for_backward(
        lambda: hgw_routing(*inputs, eps=1e-2, outer_iters=2, inner_iters=3,
                            backend=backend, distance_only=True))
    assert out is None and max(saved) == M * V_p * V_p
    dist.sum().backward()
    assert all(torch.isfinite(t.grad).all() for t in inputs)


@pytest.mark.parametrize('backend', ['torch', 'auto'])
def test_factors_record_and_flat_order_give_the_same_op(backend):
    """``(X_p, X_q, GWFactors(row, col, h1, h2), beta)`` is the op of the
    kernels' flat order ``(X_p, X_q, h1, h2, row, col, beta)``, in values
    and gradients, for the op and for its reference."""
    from mmhgw.ot import GWFactors
    options = dict(eps=1e-2, outer_iters=2, inner_iters=3)
    results = []
    for record in (False, True):
        X_p, X_q, h1, h2, row, col, beta = make_inputs(3, 2, 5, 4, 3,
                                                       torch.float64)
        args = ((GWFactors(row, col, h1, h2), beta) if record else
                (h1, h2, row, col, beta))
        dist, parts = hgw_routing(X_p, X_q, *args, backend=backend, **options)
        ref = hgw_routing_reference(X_p, X_q, *args, **options)
        (dist.sum() + parts.square().sum()).backward()
        results.append(
            (dist, parts, *ref, *(t.grad
                                  for t in (X_p, X_q, h1, h2, row, col))))
    for a, b in zip(*results):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_wrong_number_of_factor_arguments_is_a_type_error():
    X_p, X_q, h1, h2, row, col, beta = make_inputs(3, 2, 5, 4, 3,
                                                   torch.float32)
    with pytest.raises(TypeError, match='GWFactors'):
        hgw_routing(X_p, X_q, h1, h2, row, beta, outer_iters=1, inner_iters=1)


@pytest.mark.parametrize('backend', fused_backends())
@pytest.mark.parametrize('mode', ['parts', 'poses', 'distance'])
def test_no_locations_give_empty_outputs(backend, mode):
    """An empty batch of locations (an image smaller than the kernel's
    reach) gives empty outputs of the right shapes, and zero gradients."""
    X_p, X_q, h1, h2, row, col, beta = make_inputs(2, 3, 5, 4, 2,
                                                   torch.float64)
    empty = [t[:0].detach().requires_grad_() for t in (X_p, h1, row)]
    weight = torch.randn(3, 8, 6, dtype=torch.float64, requires_grad=True)
    dist, out = hgw_routing(empty[0], X_q, empty[1], h2, empty[2], col, beta,
                            eps=1e-2, outer_iters=2, inner_iters=2,
                            backend=backend, distance_only=mode == 'distance',
                            pose_weight=weight if mode == 'poses' else None)
    assert dist.shape == (0, 3)
    if mode == 'distance':
        assert out is None
    else:
        assert out.shape == ((0, 3, 6) if mode == 'poses' else (0, 3, 4, 2))
    loss = dist.sum() + (0 if out is None else out.sum())
    (g_q, ) = torch.autograd.grad(loss, [X_q])
    assert torch.equal(g_q, torch.zeros_like(X_q))
