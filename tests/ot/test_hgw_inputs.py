"""The solver's input checks: beta against [..., V_p, V_q], empty sets, eps;
the embedding distance on ordinary and on overflowing embeddings."""
import pytest
import torch

from mmhgw.ot import DISTANCE_FLOOR, embedding_distance, hgw_distance

KW = dict(outer_iters=1, inner_iters=2)


def problem(batch=(2, ), V_p=3, V_q=4):
    torch.manual_seed(0)
    C_p = torch.rand(*batch, V_p, V_p) + 0.5
    C_q = torch.rand(V_q, V_q) + 0.5
    K = torch.rand(*batch, V_p, V_q)
    return C_p, C_q, K


@pytest.mark.parametrize('shape', [(), (1, ), (2, 1, 1), (3, 4), (2, 3, 4),
                                   (1, 1, 4)])
def test_beta_broadcasting_to_the_cost_is_accepted(shape):
    C_p, C_q, K = problem()
    res = hgw_distance(C_p, C_q, K, beta=torch.full(shape, 0.5), **KW)
    ref = hgw_distance(C_p, C_q, K, beta=0.5, **KW)
    torch.testing.assert_close(res.distance, ref.distance)


@pytest.mark.parametrize(
    'shape',
    [
        (5, 4),  # last dims not (V_p, V_q) and not 1: passed the old check
        (2, 4, 1),  # V_q in the place of V_p
        (3, 2, 1, 1),  # would enlarge the batch from (2, ) to (3, 2)
        (4, 1, 1),  # does not broadcast against the batch at all
    ])
def test_beta_of_a_wrong_shape_is_refused(shape):
    C_p, C_q, K = problem()
    with pytest.raises(ValueError, match=r'beta of shape .* \(2, 3, 4\)'):
        hgw_distance(C_p, C_q, K, beta=torch.full(shape, 0.5), **KW)


@pytest.mark.parametrize('V_p,V_q', [(0, 4), (3, 0)])
def test_empty_component_sets_are_refused(V_p, V_q):
    C_p, C_q, K = problem(V_p=V_p, V_q=V_q)
    with pytest.raises(ValueError, match='at least one component'):
        hgw_distance(C_p, C_q, K, beta=0.5, **KW)


@pytest.mark.parametrize('eps', [1e-300, 1e-20, 0.0, float('nan')])
def test_eps_below_the_float32_bound_is_refused(eps):
    C_p, C_q, K = problem()
    with pytest.raises(ValueError, match=r'eps must be a finite number >= '
                       r'1\.08e-19'):
        hgw_distance(C_p, C_q, K, beta=0.5, eps=eps, **KW)


def test_embedding_distance_is_the_plain_expansion_bit_for_bit():
    """The power-of-two scaling changes nothing where the plain expansion
    does not overflow."""
    g = torch.Generator().manual_seed(0)
    X, Y = torch.randn(3, 7, 5, generator=g), torch.randn(3, 4, 5, generator=g)
    for factor in (1e-3, 1.0, 3.0, 1e12):
        x, y = X * factor, Y * factor
        sq = ((x * x).sum(-1).unsqueeze(-1) + (y * y).sum(-1).unsqueeze(-2) -
              2 * x @ y.transpose(-1, -2))
        plain = DISTANCE_FLOOR + (1 - DISTANCE_FLOOR) * (
            -torch.expm1(-sq.clamp_min(0) / 5))
        assert torch.equal(embedding_distance(x, y), plain)


@pytest.mark.parametrize('factor', [1e19, 1e30, 1e38])
def test_embedding_distance_of_large_embeddings_is_finite(factor):
    """float32 embeddings whose squares overflow (the second matrix of the
    batch) get the distances of float64, where nothing overflows, and a
    finite gradient; the ordinary first matrix is not disturbed."""
    g = torch.Generator().manual_seed(0)
    X = torch.randn(2, 6, 4, generator=g, dtype=torch.float64)
    Y = torch.randn(2, 3, 4, generator=g, dtype=torch.float64)
    ordinary = embedding_distance(X.float(), Y.float())
    X[1], Y[1] = X[1] * factor, Y[1] * factor
    x = X.float().requires_grad_()
    out = embedding_distance(x, Y.float())
    torch.testing.assert_close(out.double(), embedding_distance(X, Y),
                               rtol=1e-5, atol=1e-6)
    assert torch.equal(out[0], ordinary[0])
    (grad, ) = torch.autograd.grad(out.sum(), x)
    assert torch.isfinite(grad).all()
