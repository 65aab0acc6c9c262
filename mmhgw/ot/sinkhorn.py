"""Sinkhorn projections and the proximal-point iterations of Algorithm 1
(paper Eq. 25 / 25a), in the log domain with a stabilised kernel-domain
fast path, and the rounding of a plan onto the transport polytope.

Shapes: a log-kernel or plan [..., V_p, V_q], marginals [..., V_p] and
[..., V_q], leading dims broadcasting. Pure torch.
"""
import math
from typing import Optional, Tuple

import torch
from torch import Tensor

from .gw_terms import gw_apply
from .numerics import floored_exp, logsumexp, safe_log


def sinkhorn_log(log_kernel: Tensor, log_p: Tensor, log_q: Tensor,
                 n_iters: int, g: Optional[Tensor] = None,
                 tol: Optional[float] = None) -> Tuple[Tensor, Tensor]:
    """Log-domain Sinkhorn projection onto ``Gamma(p, q)`` (paper Eq. 25a).

    Finds potentials ``f`` [..., V_p] and ``g`` [..., V_q] such that
    ``T = exp(log_kernel + f[..., :, None] + g[..., None, :])`` has row sums
    ``p`` and column sums ``q``, by alternating
    ``f = log p - LSE_j(log_kernel + g)`` and
    ``g = log q - LSE_i(log_kernel + f)``. No ``exp`` of an unshifted kernel
    is ever taken, so ``log_kernel = -cost / eps`` is stable for any ``eps``.
    The last update is the column one: column sums are exact, row sums within
    the convergence error.

    Args:
        log_kernel: [..., V_p, V_q]. log_p: [..., V_p]. log_q: [..., V_q].
        n_iters: iterations; the exact count when ``tol`` is None (no host
            synchronisation), the maximum otherwise.
        g: warm start for the column potential (zeros if None).
        tol: stop once the row marginal error (max abs) is below ``tol``.

    Returns:
        ``(f, g)``.
    """
    if g is None:
        g = torch.zeros_like(log_kernel[..., 0, :])
    f = None
    for _ in range(n_iters):
        f = log_p - logsumexp(log_kernel + g.unsqueeze(-2), dim=-1)
        g = log_q - logsumexp(log_kernel + f.unsqueeze(-1), dim=-2)
        if tol is not None:
            rows = logsumexp(log_kernel + f.unsqueeze(-1) + g.unsqueeze(-2),
                             dim=-1)
            if (rows.exp() - log_p.exp()).abs().max() < tol:
                break
    if f is None:
        raise ValueError(f'n_iters must be >= 1, got {n_iters}')
    return f, g


def _capped_ratio(num: Tensor, den: Tensor) -> Tensor:
    """``min(num / den, 1)``, with a gradient that is finite everywhere.

    Where ``den <= num`` the result is 1 and the division is never formed:
    a plain ``(num / den.clamp_min(tiny)).clamp_max(1)`` sends the masked
    gradient ``-num / den^2`` (inf for vanishing ``den``) through a zero
    mask, which makes NaN.
    """
    over = den > num
    return torch.where(over, num / torch.where(over, den, 1.0), 1.0)


def round_to_polytope(T: Tensor, p: Tensor, q: Tensor) -> Tensor:
    """Nearby plan with exactly the marginals ``p`` and ``q``.

    The rounding of Altschuler, Weed & Rigollet (NeurIPS 2017, Alg. 2):
    scale down rows whose sum exceeds ``p``, then columns whose sum exceeds
    ``q``, and add the outer product of the remaining deficits divided by
    their total. The result lies in ``Gamma(p, q)`` and moves ``T`` by at
    most twice its marginal error (l1). Truncated Sinkhorn iterations end
    with exact column sums but inexact row sums; this makes every returned
    plan feasible with no extra iteration and no host synchronisation.

    Differentiable with finite gradients (``grad='unroll'``): divisions are
    formed only where they act, and the deficit correction is skipped when
    the total deficit is below ``sqrt(tiny)`` of the dtype (it would add
    less than that to any entry), since its gradient scales as
    ``1 / total^2``.

    Args:
        T: [..., V_p, V_q] non-negative. p: [..., V_p]. q: [..., V_q].
    """
    T = T * _capped_ratio(p, T.sum(-1)).unsqueeze(-1)
    T = T * _capped_ratio(q, T.sum(-2)).unsqueeze(-2)
    deficit_p = (p - T.sum(-1)).clamp_min(0)
    deficit_q = (q - T.sum(-2)).clamp_min(0)
    total = deficit_p.sum(-1, keepdim=True).unsqueeze(-1)
    acts = total > math.sqrt(torch.finfo(T.dtype).tiny)
    correction = (deficit_p.unsqueeze(-1) * deficit_q.unsqueeze(-2) /
                  torch.where(acts, total, 1.0))
    return T + torch.where(acts, correction, 0.0)


def scaling_iterations(log_kernel: Tensor, f: Tensor, g: Tensor, p: Tensor,
                       q: Tensor,
                       n_iters: int) -> Tuple[Tensor, Tensor, Tensor]:
    """Sinkhorn iterations in the kernel domain, from log potentials:
    ``u = p / (M v)``, ``v = q / (M^T u)``; returns ``(T, f, g)`` with
    ``T = diag(u) M diag(v)`` [..., V_p, V_q].

    ``M = exp(log_kernel + f + g)`` is formed once (one ``exp`` per entry)
    and only the scalings ``u``, ``v`` are iterated with products and sums;
    they are absorbed back into ``f``, ``g`` at the end. ``f``, ``g`` come
    from a log-domain update, so ``M``'s columns already sum to ``q`` and
    the scalings start at 1 (stabilised scaling). Entries that underflow in
    ``M`` stay 0 (an all-underflowed row loses its mass, which
    :func:`round_to_polytope` restores); divisions are floored at the
    dtype's smallest normal number.
    """
    tiny = torch.finfo(log_kernel.dtype).tiny
    M = floored_exp(log_kernel + f.unsqueeze(-1) + g.unsqueeze(-2))
    v = torch.ones_like(g)
    for _ in range(n_iters):
        u = p / (M @ v.unsqueeze(-1)).squeeze(-1).clamp_min(tiny)
        v = q / (u.unsqueeze(-2) @ M).squeeze(-2).clamp_min(tiny)
    f = f + safe_log(u)
    g = g + safe_log(v)
    return M * u.unsqueeze(-1) * v.unsqueeze(-2), f, g


def proximal_iterations(terms, K, beta, p, q, eps, outer_iters, inner_iters,
                        proximal, tol, batch_shape):
    """The outer loop of Algorithm 1 (Eq. 25 / 25a); returns the unrounded
    plan [*batch_shape, V_p, V_q].

    From ``T_0 = p q^T``, step ``v`` projects
    ``T_{v-1} exp(-(L (x) T_{v-1} + beta K) / eps)`` (without the factor
    ``T_{v-1}`` when not ``proximal``: the entropic problem) onto
    ``Gamma(p, q)``.

    Each proximal step starts with one log-domain Sinkhorn iteration, exact
    for any ``eps``. In oracle mode (``tol`` set) the rest stay in the log
    domain; with fixed counts (the hot path) the remaining
    ``inner_iters - 1`` run in the kernel domain (:func:`scaling_iterations`),
    which computes the same iterates with one ``exp`` per entry instead of
    two per iteration.
    """
    log_p, log_q = safe_log(p), safe_log(q)
    log_T = log_p.unsqueeze(-1) + log_q.unsqueeze(-2)
    log_T = log_T.expand(batch_shape + log_T.shape[-2:])
    T = log_T.exp()
    g = None
    for _ in range(outer_iters):
        # Eq. 25a: the constant + eps of the paper shifts every entry of the
        # cost alike and is absorbed by the potentials, so it is left out.
        cost = gw_apply(terms, T) + beta * K
        log_kernel = -cost / eps
        if proximal:
            # KL(T || T_prev) proximal term of Eq. 25.
            log_kernel = log_kernel + log_T
        if tol is None:
            f, g = sinkhorn_log(log_kernel, log_p, log_q, 1, g=g)
            if inner_iters > 1:
                T, f, g = scaling_iterations(log_kernel, f, g, p, q,
                                             inner_iters - 1)
            else:
                T = None
            log_T = log_kernel + f.unsqueeze(-1) + g.unsqueeze(-2)
            T = floored_exp(log_T) if T is None else T
        else:
            f, g = sinkhorn_log(log_kernel, log_p, log_q, inner_iters, g=g,
                                tol=tol)
            new_log_T = log_kernel + f.unsqueeze(-1) + g.unsqueeze(-2)
            new_T = floored_exp(new_log_T)
            moved = (new_T - T).abs().max()
            log_T, T = new_log_T, new_T
            if moved < tol:
                break
    return T
