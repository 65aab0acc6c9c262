"""The solver's shape checks: beta against [..., V_p, V_q], empty sets."""
import pytest
import torch

from mmhgw.ot import hgw_distance

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


@pytest.mark.parametrize('shape', [
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
