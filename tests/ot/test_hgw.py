"""The HGW solver against POT (float64 oracle) and its numerical contract."""
import warnings

import numpy as np
import ot
import pytest
import torch

from mmhgw.ot import (embedding_distance, gw_tensor_product, hgw_distance,
                      sinkhorn_log)


def make_problem(V_p, V_q, d=4, seed=0, dtype=torch.float64, batch=()):
    gen = torch.Generator().manual_seed(seed)
    X_p = torch.randn(*batch, V_p, d, generator=gen, dtype=dtype)
    X_q = torch.randn(*batch, V_q, d, generator=gen, dtype=dtype)
    return (embedding_distance(X_p, X_p), embedding_distance(X_q, X_q),
            embedding_distance(X_p, X_q))


def uniform(V):
    return np.full(V, 1.0 / V)


def pot_proximal_reference(C_p, C_q, K, beta, eps, outer, loss_fun='kl_loss',
                           entropic=False):
    """One problem, Algorithm 1 rebuilt from POT's primitives in float64."""
    C_p, C_q, K = C_p.numpy(), C_q.numpy(), K.numpy()
    p, q = uniform(len(C_p)), uniform(len(C_q))
    T = np.outer(p, q)
    constC, hC1, hC2 = ot.gromov.init_matrix(C_p, C_q, p, q, loss_fun)
    warm = None
    for _ in range(outer):
        cost = ot.gromov.tensor_product(constC, hC1, hC2, T) + beta * K
        if not entropic:
            with np.errstate(divide='ignore'):
                cost = cost - eps * np.log(T)
        with warnings.catch_warnings():
            warnings.simplefilter('ignore')
            T, log = ot.bregman.sinkhorn_log(p, q, cost, eps, numItermax=20000,
                                             stopThr=1e-13, log=True,
                                             warmstart=warm)
        warm = (log['log_u'], log['log_v'])
    assert np.abs(T.sum(0) - q).max() < 1e-10  # the reference converged
    assert np.abs(T.sum(1) - p).max() < 1e-10
    distance = ot.gromov.gwloss(constC, hC1, hC2, T) + beta * (K * T).sum()
    return distance, T


@pytest.mark.parametrize('eps', [1e-3, 1e-2])
@pytest.mark.parametrize('shape,seed', [((8, 4), 0), ((12, 5), 1),
                                        ((6, 6), 2)])
def test_matches_pot_primitives(eps, shape, seed):
    C_p, C_q, K = make_problem(*shape, seed=seed)
    ref_d, ref_T = pot_proximal_reference(C_p, C_q, K, 0.5, eps, outer=8)
    res = hgw_distance(C_p, C_q, K, beta=0.5, eps=eps, outer_iters=8,
                       inner_iters=20000, tol=1e-13)
    assert abs(res.distance.item() - ref_d) < 1e-6
    np.testing.assert_allclose(res.plan.numpy(), ref_T, atol=1e-6)


def test_entropic_ablation_matches_pot_primitives():
    C_p, C_q, K = make_problem(8, 4, seed=3)
    ref_d, ref_T = pot_proximal_reference(C_p, C_q, K, 0.5, 0.1, outer=6,
                                          entropic=True)
    res = hgw_distance(C_p, C_q, K, beta=0.5, eps=0.1, outer_iters=6,
                       inner_iters=20000, tol=1e-13, regularizer='entropic')
    assert abs(res.distance.item() - ref_d) < 1e-6
    np.testing.assert_allclose(res.plan.numpy(), ref_T, atol=1e-6)


@pytest.mark.parametrize('loss,loss_fun', [('kl', 'kl_loss'),
                                           ('square', 'square_loss')])
def test_fixed_point_matches_pot_fused_ppa(loss, loss_fun):
    """At eps = 0.1 POT's entropic FGW with the PPA solver (its gradient
    carries a factor 2, hence M = 2 beta K and alpha = 0.5) runs the same
    iteration: the same number of proximal steps gives the same plan."""
    beta, eps = 0.7, 0.1
    C_p, C_q, K = make_problem(10, 5, seed=4)
    p, q = uniform(10), uniform(5)
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')
        ref_T = ot.gromov.entropic_fused_gromov_wasserstein(
            2 * beta * K.numpy(), C_p.numpy(), C_q.numpy(), p, q,
            loss_fun=loss_fun, epsilon=eps, alpha=0.5, G0=np.outer(p, q),
            solver='PPA', max_iter=4, tol=0.0, numItermax=50000, stopThr=1e-13)
    # POT's kernel-domain inner Sinkhorn stalls once the proximal kernel
    # grows sparse (marginal errors ~1e-5 after 30 steps), so the oracle is
    # the first steps, where it converges.
    assert np.abs(ref_T.sum(0) - q).max() < 1e-10
    res = hgw_distance(C_p, C_q, K, beta=beta, eps=eps, loss=loss,
                       outer_iters=4, inner_iters=50000, tol=1e-13)
    np.testing.assert_allclose(res.plan.numpy(), ref_T, atol=1e-6)
    # Our distance is computed from the plan, not POT's fgw value.
    T = torch.from_numpy(ref_T)
    expected = ((gw_tensor_product(C_p, C_q, T, loss=loss) + beta * K) *
                T).sum()
    assert abs(res.distance.item() - expected.item()) < 1e-6


def test_square_loss_gw_matches_pot_gw_solver():
    """beta = 0 leaves pure GW: POT's entropic GW with the PPA solver. POT's
    GW gradient is 2 L (x) T where ours is L (x) T, so POT at eps matches
    ours at eps / 2."""
    eps = 0.05
    C_p, C_q, K = make_problem(9, 6, seed=5)
    p, q = uniform(9), uniform(6)
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')
        ref_T, log = ot.gromov.entropic_gromov_wasserstein(
            C_p.numpy(), C_q.numpy(), p, q, loss_fun='square_loss',
            epsilon=eps, G0=np.outer(p, q), solver='PPA', max_iter=4, tol=0.0,
            log=True, numItermax=50000, stopThr=1e-13)
    assert np.abs(ref_T.sum(0) - q).max() < 1e-10
    res = hgw_distance(C_p, C_q, K, beta=0.0, eps=eps / 2, loss='square',
                       outer_iters=4, inner_iters=50000, tol=1e-13)
    np.testing.assert_allclose(res.plan.numpy(), ref_T, atol=1e-6)
    # POT's gw_dist is the same quadratic form at its plan.
    assert abs(res.distance.item() - log['gw_dist']) < 1e-6


def test_sinkhorn_matches_pot():
    gen = torch.Generator().manual_seed(6)
    M = torch.rand(7, 5, generator=gen, dtype=torch.float64)
    a = torch.rand(7, generator=gen, dtype=torch.float64) + 0.1
    b = torch.rand(5, generator=gen, dtype=torch.float64) + 0.1
    a, b = a / a.sum(), b / b.sum()
    reg = 0.01
    ref = ot.bregman.sinkhorn_log(a.numpy(), b.numpy(), M.numpy(), reg,
                                  numItermax=20000, stopThr=1e-14)
    f, g = sinkhorn_log(-M / reg, a.log(), b.log(), 20000, tol=1e-14)
    T = (-M / reg + f[:, None] + g[None, :]).exp()
    np.testing.assert_allclose(T.numpy(), ref, atol=1e-10)


def test_gw_tensor_product_matches_pot():
    C_p, C_q, _ = make_problem(6, 4, seed=7)
    p, q = uniform(6), uniform(4)
    T = np.outer(p, q)
    T = T * np.random.default_rng(0).uniform(0.5, 1.5, T.shape)
    for loss, loss_fun in (('kl', 'kl_loss'), ('square', 'square_loss')):
        constC, hC1, hC2 = ot.gromov.init_matrix(C_p.numpy(), C_q.numpy(), p,
                                                 q, loss_fun)
        ref = ot.gromov.tensor_product(constC, hC1, hC2, T)
        ours = gw_tensor_product(C_p, C_q, torch.from_numpy(T), loss=loss,
                                 p=torch.from_numpy(p), q=torch.from_numpy(q))
        np.testing.assert_allclose(ours.numpy(), ref, atol=1e-12)


def test_permuted_copy_has_near_zero_distance_and_permutation_plan():
    V = 7
    gen = torch.Generator().manual_seed(8)
    X = torch.randn(V, 5, generator=gen, dtype=torch.float64)
    perm = torch.randperm(V, generator=gen)
    Y = X[perm] + 1e-3 * torch.randn(V, 5, generator=gen, dtype=torch.float64)
    # The cross cost needs no positivity floor (it is never logged).
    res = hgw_distance(embedding_distance(X, X), embedding_distance(Y, Y),
                       embedding_distance(X, Y, floor=0.0), beta=0.5, eps=1e-3,
                       outer_iters=50, inner_iters=2000, tol=1e-12)
    expected = torch.zeros(V, V, dtype=torch.float64)
    expected[perm, torch.arange(V)] = 1.0 / V
    assert res.distance.item() < 1e-3
    assert (res.plan - expected).abs().max().item() < 1e-3


@pytest.mark.parametrize('dtype', [torch.float32, torch.float64])
@pytest.mark.parametrize('eps', [1e-4, 1e-3, 1e-1, 1.0])
def test_marginals_within_1e5(dtype, eps):
    C_p, C_q, K = make_problem(8, 4, seed=9, dtype=dtype, batch=(6, ))
    res = hgw_distance(C_p, C_q, K, beta=0.5, eps=eps, outer_iters=4,
                       inner_iters=200, tol=1e-7)
    assert torch.isfinite(res.distance).all()
    assert (res.plan.sum(-1) - 1 / 8).abs().max() < 1e-5
    assert (res.plan.sum(-2) - 1 / 4).abs().max() < 1e-5


@pytest.mark.parametrize('dtype', [torch.float32, torch.float64])
@pytest.mark.parametrize('eps', [1e-3, 1e-1])
def test_fixed_counts_batched_equals_looped(dtype, eps):
    C_p, C_q, K = make_problem(8, 4, seed=9, dtype=dtype, batch=(3, 2))
    kwargs = dict(beta=0.5, eps=eps, outer_iters=3, inner_iters=5)
    res = hgw_distance(C_p, C_q, K, **kwargs)
    assert res.distance.shape == (3, 2)
    assert res.plan.shape == (3, 2, 8, 4)
    # Few iterations, yet every plan is rounded onto Gamma(p, q).
    torch.testing.assert_close(res.plan.sum(-2),
                               torch.full((3, 2, 4), 0.25, dtype=dtype),
                               atol=1e-5, rtol=0)
    torch.testing.assert_close(res.plan.sum(-1),
                               torch.full((3, 2, 8), 0.125, dtype=dtype),
                               atol=1e-5, rtol=0)
    for i in range(3):
        for j in range(2):
            one = hgw_distance(C_p[i, j], C_q[i, j], K[i, j], **kwargs)
            torch.testing.assert_close(one.plan, res.plan[i, j])
            torch.testing.assert_close(one.distance, res.distance[i, j])


def test_broadcast_over_subcapsules():
    """C_p [B, L, 1, Vp, Vp] against subcapsules C_q [1, 1, N, Vq, Vq]."""
    B, L, N = 2, 3, 4
    gen = torch.Generator().manual_seed(11)
    X_p = torch.randn(B, L, 1, 8, 3, generator=gen)
    X_q = torch.randn(1, 1, N, 4, 3, generator=gen)
    C_p = embedding_distance(X_p, X_p)
    C_q = embedding_distance(X_q, X_q)
    K = embedding_distance(X_p, X_q)
    res = hgw_distance(C_p, C_q, K, beta=0.5, outer_iters=3, inner_iters=5)
    assert res.distance.shape == (B, L, N)
    one = hgw_distance(C_p[1, 2, 0], C_q[0, 0, 3], K[1, 2, 3], beta=0.5,
                       outer_iters=3, inner_iters=5)
    torch.testing.assert_close(one.distance, res.distance[1, 2, 3])


def test_non_uniform_marginals_with_zero_entry():
    C_p, C_q, K = make_problem(5, 3, seed=12)
    p = torch.tensor([0.4, 0.0, 0.2, 0.3, 0.1], dtype=torch.float64)
    q = torch.tensor([0.5, 0.25, 0.25], dtype=torch.float64)
    res = hgw_distance(C_p, C_q, K, beta=0.5, eps=1e-2, outer_iters=5,
                       inner_iters=200, p=p, q=q)
    assert torch.isfinite(res.plan).all() and torch.isfinite(res.distance)
    torch.testing.assert_close(res.plan.sum(-1), p, atol=1e-6, rtol=0)
    torch.testing.assert_close(res.plan.sum(-2), q, atol=1e-6, rtol=0)


@pytest.mark.parametrize('case', ['equal', 'zero_k', 'huge'])
@pytest.mark.parametrize('grad', ['envelope', 'unroll'])
@pytest.mark.parametrize('dtype', [torch.float32, torch.float64])
def test_degenerate_inputs_give_finite_values_and_gradients(case, grad, dtype):
    if case == 'equal':  # every entry alike: all plans are optimal
        C_p = torch.full((4, 8, 8), 0.5, dtype=dtype)
        C_q = torch.full((4, 4, 4), 0.5, dtype=dtype)
        K = torch.full((4, 8, 4), 0.5, dtype=dtype)
    elif case == 'zero_k':  # K all zero, C at the positivity floor
        C_p = torch.full((4, 8, 8), 1e-30, dtype=dtype)
        C_q = torch.full((4, 4, 4), 1e-30, dtype=dtype)
        K = torch.zeros(4, 8, 4, dtype=dtype)
    else:  # costs of 1e6 at eps 1e-4: cost / eps = 1e10
        C_p, C_q, K = make_problem(8, 4, seed=13, dtype=dtype, batch=(4, ))
        C_p, C_q, K = C_p * 1e6, C_q * 1e6, K * 1e6
    C_p, C_q, K = (x.clone().requires_grad_() for x in (C_p, C_q, K))
    res = hgw_distance(C_p, C_q, K, beta=0.5, eps=1e-4, outer_iters=3,
                       inner_iters=3, grad=grad)
    assert torch.isfinite(res.distance).all()
    assert torch.isfinite(res.plan).all()
    res.distance.sum().backward()
    for x in (C_p, C_q, K):
        assert torch.isfinite(x.grad).all()


def test_envelope_gradient_matches_finite_differences():
    C_p, C_q, K = make_problem(6, 3, seed=14)
    gen = torch.Generator().manual_seed(15)
    kwargs = dict(beta=0.6, eps=1e-3, outer_iters=100, inner_iters=5000,
                  tol=1e-12)

    def value(C_p, C_q, K):
        return hgw_distance(C_p, C_q, K, **kwargs).distance

    inputs = [x.clone().requires_grad_() for x in (C_p, C_q, K)]
    value(*inputs).backward()
    h = 1e-6
    for i, x in enumerate(inputs):
        direction = torch.rand(x.shape, generator=gen, dtype=x.dtype)
        if i < 2:  # structure matrices stay symmetric
            direction = (direction + direction.T) / 2
        shifted = [y.detach() for y in inputs]
        up, down = list(shifted), list(shifted)
        up[i] = shifted[i] + h * direction
        down[i] = shifted[i] - h * direction
        numeric = (value(*up) - value(*down)) / (2 * h)
        analytic = (x.grad * direction).sum()
        assert abs(numeric.item() -
                   analytic.item()) < 1e-5 * max(1.0, abs(numeric.item()))


def test_unroll_gradcheck():
    C_p, C_q, K = make_problem(4, 3, seed=16)
    inputs = [x.clone().requires_grad_() for x in (C_p, C_q, K)]

    def value(C_p, C_q, K):
        return hgw_distance(C_p, C_q, K, beta=0.5, eps=0.05, outer_iters=2,
                            inner_iters=3, grad='unroll').distance

    assert torch.autograd.gradcheck(value, inputs)


def test_unroll_and_envelope_agree_on_value():
    C_p, C_q, K = make_problem(6, 3, seed=17)
    kw = dict(beta=0.5, eps=1e-2, outer_iters=3, inner_iters=10)
    a = hgw_distance(C_p, C_q, K, grad='unroll', **kw)
    b = hgw_distance(C_p, C_q, K, grad='envelope', **kw)
    torch.testing.assert_close(a.distance, b.distance)
    assert not b.plan.requires_grad


@pytest.mark.parametrize('kwargs,match', [
    (dict(eps=0.0), 'eps'),
    (dict(eps=-1e-3), 'eps'),
    (dict(loss='l2'), 'loss'),
    (dict(regularizer='kl'), 'regularizer'),
    (dict(grad='implicit'), 'grad'),
    (dict(outer_iters=0), 'outer_iters'),
    (dict(inner_iters=1.5), 'inner_iters'),
    (dict(tol=-1.0), 'tol'),
])
def test_bad_options_raise(kwargs, match):
    C_p, C_q, K = make_problem(4, 3)
    args = dict(beta=0.5, outer_iters=2, inner_iters=2)
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        hgw_distance(C_p, C_q, K, **args)


def test_bad_shapes_and_values_raise():
    C_p, C_q, K = make_problem(4, 3)
    kw = dict(beta=0.5, outer_iters=2, inner_iters=2)
    with pytest.raises(ValueError, match='C_p must be square'):
        hgw_distance(C_p[:, :3], C_q, K, **kw)
    with pytest.raises(ValueError, match=r'K must end in \(V_p, V_q\)'):
        hgw_distance(C_p, C_q, K.T, **kw)
    with pytest.raises(ValueError, match='broadcast'):
        hgw_distance(C_p.expand(2, 4, 4), C_q.expand(3, 3, 3), K, **kw)
    with pytest.raises(ValueError, match='strictly positive'):
        hgw_distance(C_p - 1.0, C_q, K, **kw)
    with pytest.raises(ValueError, match='q must end in 3'):
        hgw_distance(C_p, C_q, K, q=torch.ones(4, dtype=C_p.dtype) / 4, **kw)
    # The square loss takes no log: non-positive structure is allowed.
    res = hgw_distance(C_p - 1.0, C_q, K, loss='square', **kw)
    assert torch.isfinite(res.distance)


@pytest.mark.parametrize('eps', [1e-3, 1e-2, 1e-1])
def test_fixed_count_kernel_domain_equals_log_domain_iterates(eps):
    """The hot path's kernel-domain inner iterations compute the iterates of
    the log-domain Sinkhorn (up to the final rounding onto the polytope)."""
    from mmhgw.ot import gw_apply, gw_terms, round_to_polytope
    C_p, C_q, K = make_problem(10, 4, seed=18, batch=(3, ))
    p = torch.full((10, ), 0.1, dtype=torch.float64)
    q = torch.full((4, ), 0.25, dtype=torch.float64)
    terms = gw_terms(C_p, C_q, p, q)
    log_T = (p[:, None] * q[None, :]).log().expand(3, 10, 4)
    g = None
    for _ in range(3):
        log_kernel = log_T - (gw_apply(terms, log_T.exp()) + 0.5 * K) / eps
        f, g = sinkhorn_log(log_kernel, p.log(), q.log(), 4, g=g)
        log_T = log_kernel + f[..., :, None] + g[..., None, :]
    expected = round_to_polytope(log_T.exp(), p, q)
    res = hgw_distance(C_p, C_q, K, beta=0.5, eps=eps, outer_iters=3,
                       inner_iters=4)
    torch.testing.assert_close(res.plan, expected, atol=1e-9, rtol=1e-7)


@pytest.mark.parametrize('grad', ['envelope', 'unroll'])
@pytest.mark.parametrize('chunk_entries', [1, 7 * 3 * 4, 1000])
def test_chunked_solve_equals_one_solve(grad, chunk_entries):
    """Chunks along the largest batch axis, with inputs that broadcast along
    it (C_q, beta) and inputs that do not (C_p, K, batched marginals)."""
    gen = torch.Generator().manual_seed(3)
    B, L, N, V_p, V_q = 2, 11, 3, 4, 3
    C_p = torch.rand(B, L, 1, V_p, V_p, generator=gen,
                     dtype=torch.float64) + 0.5
    C_q = torch.rand(N, V_q, V_q, generator=gen, dtype=torch.float64) + 0.5
    K = torch.rand(B, L, N, V_p, V_q, generator=gen, dtype=torch.float64,
                   requires_grad=True)
    p = torch.softmax(
        torch.randn(B, L, 1, V_p, generator=gen, dtype=torch.float64), -1)
    beta = torch.full((N, 1, 1), 0.5, dtype=torch.float64)
    kwargs = dict(beta=beta, eps=1e-2, outer_iters=2, inner_iters=3, p=p,
                  grad=grad)
    whole = hgw_distance(C_p, C_q, K, chunk_entries=None, **kwargs)
    split = hgw_distance(C_p, C_q, K, chunk_entries=chunk_entries, **kwargs)
    assert split.plan.shape == whole.plan.shape == (B, L, N, V_p, V_q)
    torch.testing.assert_close(split.plan, whole.plan, rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(split.distance, whole.distance, rtol=1e-12,
                               atol=1e-14)
    g_whole, = torch.autograd.grad(whole.distance.sum(), K)
    g_split, = torch.autograd.grad(split.distance.sum(), K)
    torch.testing.assert_close(g_split, g_whole, rtol=1e-12, atol=1e-14)


def test_chunk_split_picks_largest_axis_and_bounds_chunk_size():
    from mmhgw.ot.solver import _chunk_split
    assert _chunk_split(torch.Size([2, 100, 8]), 16, None) is None
    assert _chunk_split(torch.Size([2, 100, 8]), 16, 10**6) is None
    axis, length = _chunk_split(torch.Size([2, 100, 8]), 16, 1000)
    assert axis == 1 and length * 2 * 8 * 16 <= 1000 and length >= 1
    # A single slice larger than the budget still makes progress.
    assert _chunk_split(torch.Size([3, 5]), 16, 1) == (1, 1)


@pytest.mark.parametrize('chunk_entries', [0, -5, 2.5, 'yes'])
def test_bad_chunk_entries_raise(chunk_entries):
    C = torch.ones(1, 2, 2)
    with pytest.raises(ValueError, match='chunk_entries'):
        hgw_distance(C, C, C, beta=0.5, outer_iters=1, inner_iters=1,
                     chunk_entries=chunk_entries)


@pytest.mark.parametrize('dtype', [torch.float32, torch.float64])
def test_rounding_gradient_is_finite_with_underflowed_rows(dtype):
    """What eps = 1e-3 produces: near-permutation plans with rows whose
    mass nearly underflowed. The rounding restores their mass, and its
    gradient must stay finite (the capped ratio p / rows sent -p / rows^2 =
    -inf through a zero mask: NaN)."""
    from mmhgw.ot import round_to_polytope
    V = 6
    p = torch.full((V, ), 1 / V, dtype=dtype)
    T = torch.eye(V, dtype=dtype) / V
    # A row whose mass nearly underflowed (its squared sum does), and a
    # small deficit elsewhere.
    T[0, 0] = 1e-30 if dtype == torch.float32 else 1e-200
    T[1, 1] -= 1e-3
    T = T.requires_grad_()
    R = round_to_polytope(T, p, p)
    (R * torch.randn(V, V, dtype=dtype)).sum().backward()
    assert torch.isfinite(T.grad).all()
    torch.testing.assert_close(R.sum(-1), p)
    torch.testing.assert_close(R.sum(-2), p)
