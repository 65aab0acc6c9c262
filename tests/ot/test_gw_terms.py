"""The GW factors and terms of Eq. 10 against the O(V^4) sum of Eq. 8."""
import pytest
import torch

from mmhgw.ot import GWFactors, gw_apply, gw_factors, gw_terms


@pytest.mark.parametrize('loss', ['kl', 'square'])
def test_factors_apply_as_the_tensor_product_of_eq_8(loss):
    g = torch.Generator().manual_seed(0)
    V_p, V_q = 4, 3
    C_p = 0.5 + torch.rand(V_p, V_p, generator=g, dtype=torch.float64)
    C_q = 0.5 + torch.rand(V_q, V_q, generator=g, dtype=torch.float64)
    C_p, C_q = (C_p + C_p.T) / 2, (C_q + C_q.T) / 2
    T = torch.rand(V_p, V_q, generator=g, dtype=torch.float64)
    p, q = T.sum(1), T.sum(0)
    factors = gw_factors(C_p, C_q, p, q, loss)
    assert isinstance(factors, GWFactors)
    assert factors.row.shape == (V_p, ) and factors.col.shape == (V_q, )
    assert factors.h1.shape == (V_p, V_p) and factors.h2.shape == (V_q, V_q)
    a, b = C_p[:, None, :, None], C_q[None, :, None, :]  # [i, i', j, j']
    L = (a * torch.log(a / b) - a + b if loss == 'kl' else (a - b)**2)
    expected = torch.einsum('abjk,ab->jk', L, T)
    torch.testing.assert_close(gw_apply(factors.terms(), T), expected)
    torch.testing.assert_close(gw_apply(gw_terms(C_p, C_q, p, q, loss), T),
                               expected)
