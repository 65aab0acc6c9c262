"""The Gromov-Wasserstein tensor product and the HGW value (paper Eq. 8,
10, 21, 24), POT's ``init_matrix`` / ``tensor_product`` / ``gwloss`` split.

Notation: two domains with ``V_p`` and ``V_q`` components, structure
matrices ``C_p`` [..., V_p, V_p] and ``C_q`` [..., V_q, V_q], a cross cost
``K`` [..., V_p, V_q], marginals ``p`` [..., V_p], ``q`` [..., V_q] and a plan
``T`` [..., V_p, V_q]. Leading dims broadcast against each other.
"""
from typing import NamedTuple, Optional, Tuple, Union

import torch
from torch import Tensor

LOSSES = ('kl', 'square')


class GWTerms(NamedTuple):
    """Peyre's decomposition of ``L(C_p, C_q) (x) T`` (paper Eq. 10), ready
    to apply: ``L (x) T = const - h1 @ T @ h2t`` with
    ``const = row 1^T + 1 col^T`` [..., V_p, V_q], ``h1`` [..., V_p, V_p]
    and ``h2t = h2^T`` [..., V_q, V_q] (see :class:`GWFactors`)."""
    const: Tensor
    h1: Tensor
    h2t: Tensor


class GWFactors(NamedTuple):
    """The plan-independent factors of Eq. 10, in the one order used by the
    solver, the routing op and the capsule layer.

    For a loss ``L(a, b) = f1(a) + f2(b) - h1(a) h2(b)``:
    ``row = f1(C_p) p`` [..., V_p], ``col = f2(C_q) q`` [..., V_q],
    ``h1 = h1(C_p)`` [..., V_p, V_p] and ``h2 = h2(C_q)`` [..., V_q, V_q], so
    that ``L (x) T = row 1^T + 1 col^T - h1 T h2^T``.
    """
    row: Tensor
    col: Tensor
    h1: Tensor
    h2: Tensor

    def terms(self) -> GWTerms:
        """The :class:`GWTerms` of these factors (the constant expanded to
        the broadcast of ``row`` [..., V_p, 1] and ``col`` [..., 1, V_q])."""
        return GWTerms(
            self.row.unsqueeze(-1) + self.col.unsqueeze(-2), self.h1,
            self.h2.transpose(-1, -2))


def source_factors(C_p: Tensor, p: Tensor,
                   loss: str = 'kl') -> Tuple[Tensor, Tensor]:
    """``row = f1(C_p) p`` [..., V_p] and ``h1 = h1(C_p)`` [..., V_p, V_p]:
    the source side of :func:`gw_factors` (same arguments)."""
    if loss == 'kl':
        f1 = C_p * torch.log(C_p) - C_p
    elif loss == 'square':
        f1 = C_p * C_p
    else:
        raise ValueError(f'loss must be one of {LOSSES}, got {loss!r}')
    return (f1 @ p.unsqueeze(-1)).squeeze(-1), C_p


def target_factors(C_q: Tensor, q: Tensor,
                   loss: str = 'kl') -> Tuple[Tensor, Tensor]:
    """``col = f2(C_q) q`` [..., V_q] and ``h2 = h2(C_q)`` [..., V_q, V_q]:
    the target side of :func:`gw_factors` (same arguments)."""
    if loss == 'kl':
        f2, h2 = C_q, torch.log(C_q)
    elif loss == 'square':
        f2, h2 = C_q * C_q, 2 * C_q
    else:
        raise ValueError(f'loss must be one of {LOSSES}, got {loss!r}')
    return (f2 @ q.unsqueeze(-1)).squeeze(-1), h2


def gw_factors(C_p: Tensor, C_q: Tensor, p: Tensor, q: Tensor,
               loss: str = 'kl') -> GWFactors:
    """:class:`GWFactors` of ``C_p`` [..., V_p, V_p], ``C_q`` [..., V_q, V_q]
    and marginals ``p`` [..., V_p], ``q`` [..., V_q].

    Loss decompositions ``L(a, b) = f1(a) + f2(b) - h1(a) h2(b)``:

    - ``'kl'``: ``L(a, b) = a log(a / b) - a + b``;
      ``f1(a) = a log a - a``, ``f2(b) = b``, ``h1(a) = a``, ``h2(b) = log b``.
      Requires ``C_p, C_q > 0``.
    - ``'square'``: ``L(a, b) = (a - b)^2``;
      ``f1(a) = a^2``, ``f2(b) = b^2``, ``h1(a) = a``, ``h2(b) = 2 b``.
    """
    row, h1 = source_factors(C_p, p, loss)
    col, h2 = target_factors(C_q, q, loss)
    return GWFactors(row, col, h1, h2)


def gw_terms(C_p: Tensor, C_q: Tensor, p: Tensor, q: Tensor,
             loss: str = 'kl') -> GWTerms:
    """:class:`GWTerms` of :func:`gw_factors` (same arguments)."""
    return gw_factors(C_p, C_q, p, q, loss).terms()


def gw_apply(terms: GWTerms, T: Tensor) -> Tensor:
    """``L(C_p, C_q) (x) T = const - h1 T h2t`` [..., V_p, V_q] (Eq. 10).

    ``einsum`` rather than ``@``: a broadcast dim (``h1`` shared by every
    subcapsule, ``h2t`` by every location) is folded into the matrix product
    instead of being expanded into many tiny batched products.
    """
    h1_T = torch.einsum('...ij,...jk->...ik', terms.h1, T)
    return terms.const - torch.einsum('...ij,...jk->...ik', h1_T, terms.h2t)


def gw_tensor_product(C_p: Tensor, C_q: Tensor, T: Tensor, *, loss: str = 'kl',
                      p: Optional[Tensor] = None,
                      q: Optional[Tensor] = None) -> Tensor:
    """The GW tensor product ``L(C_p, C_q) (x) T`` of paper Eq. 8 / Eq. 10.

    ``[L (x) T]_{j j'} = sum_{i i'} L(C_p[i, j], C_q[i', j']) T[i, i']`` for
    symmetric ``C``; computed in ``O(V^3)`` through Eq. 10 instead of the
    ``O(V^4)`` sum. Eq. 10 holds for ``T`` in ``Gamma(p, q)``: ``p`` and ``q``
    default to the marginals of ``T``.

    Args:
        C_p: [..., V_p, V_p]. C_q: [..., V_q, V_q]. T: [..., V_p, V_q].
        loss: ``'kl'`` or ``'square'`` (see :func:`gw_factors`).

    Returns:
        [..., V_p, V_q].
    """
    p = T.sum(-1) if p is None else p
    q = T.sum(-2) if q is None else q
    return gw_apply(gw_terms(C_p, C_q, p, q, loss), T)


def hgw_value(terms: GWTerms, K: Tensor, T: Tensor,
              beta: Union[float, Tensor]) -> Tensor:
    """``<L(C_p, C_q) (x) T, T> + beta <K, T>`` [...] (Eq. 21 / Eq. 24)."""
    return ((gw_apply(terms, T) + beta * K) * T).sum((-1, -2))
