"""The HGW routing op in plain torch: its specification, and the
``'torch'`` backend of :func:`mmhgw.ops.hgw_routing` (the fused C++ and
Triton kernels compute the same).

Per location ``m`` and output type ``n`` the op solves the HGW problem of
paper Eq. 21 between the components ``X_p[m]`` [V_p, d] and the subcapsule
``X_q[n]`` [V_q, d] by the proximal-point method (Eq. 25 / 25a, Algorithm 1),
and returns

- ``distance[m, n] = <L(C_p, C_q) (x) T + beta K, T>`` (Eq. 21, 24), and
- ``parts[m, n] = V_q T^T X_p[m]`` [V_q, d], the barycentric projection of
  the components onto the subcapsule's parts through the plan ``T``, or,
  given a pose map ``W`` [N, V_q d, O], the poses ``vec(parts[m, n]) W[n]``
  [O] (:func:`pose_map`).

The structures enter through :class:`mmhgw.ot.GWFactors`
(``L (x) T = row 1^T + 1 col^T - h1 T h2^T``), with ``row`` [M, V_p] and
``h1`` [M, V_p, V_p] per location and ``col`` [N, V_q] and ``h2``
[N, V_q, V_q] per output type. The cross cost
``K = 1 - exp(-|x_i - y_j|^2 / d)`` is computed inside (:func:`cross_cost`).
"""
import math
from typing import Optional, Sequence, Tuple, Union

import torch
from torch import Tensor

from mmhgw.arg_checks import check_choice
from mmhgw.ot import (CPU_CHUNK_ENTRIES, GWFactors, bound_distance,
                      check_solver_options, hgw_value, power_of_two_scale,
                      scaled_squared_distance, solve_plan, uniform_marginals,
                      uniform_plan)

#: ``'hgw'``: the HGW plan; ``'uniform'``: the plan fixed to ``p q^T`` (no
#: optimal transport, the baseline routing).
ROUTINGS = ('hgw', 'uniform')


def factor_args(args: Sequence) -> Tuple[GWFactors, Union[float, Tensor]]:
    """``(factors, beta)`` from the positional arguments of the op after
    ``X_p, X_q``: ``(GWFactors, beta)``, or the kernels' flat order
    ``(h1, h2, row, col, beta)`` (the schema of the custom op)."""
    if len(args) == 2 and isinstance(args[0], GWFactors):
        return args[0], args[1]
    if len(args) == 5:
        h1, h2, row, col, beta = args
        return GWFactors(row, col, h1, h2), beta
    raise TypeError('the HGW routing op takes (X_p, X_q, factors: '
                    'GWFactors, beta) or (X_p, X_q, h1, h2, row, col, '
                    f'beta); got {2 + len(args)} positional arguments')


def check_routing_options(*, routing: str, **solver):
    """Raise a ValueError naming an invalid ``routing`` or solver option
    (:func:`mmhgw.ot.check_solver_options`): the op's options apart from
    its tensors."""
    check_choice('routing', routing, ROUTINGS)
    check_solver_options(**solver)


def check_routing_args(X_p: Tensor, X_q: Tensor, factors: GWFactors,
                       beta: Union[float,
                                   Tensor], pose_weight: Optional[Tensor], *,
                       routing: str, **solver):
    """Raise a ValueError naming the first invalid input of the op: the
    routing, the solver options (:func:`mmhgw.ot.check_solver_options`),
    the shapes of the inputs (X_p [..., V_p, d] with its factors per
    location, X_q [N, V_q, d] with its factors per type, pose_weight
    [N, V_q d, O]), a one-element ``beta`` and one device."""
    check_routing_options(routing=routing, **solver)
    if X_p.dim() < 2 or X_q.dim() != 3:
        raise ValueError(f'X_p must be [..., V_p, d] and X_q [N, V_q, d], '
                         f'got {tuple(X_p.shape)} and {tuple(X_q.shape)}')
    lead, (V_p, d) = X_p.shape[:-2], X_p.shape[-2:]
    N, V_q, d_q = X_q.shape
    expected = dict(X_q=(N, V_q, d), h1=lead + (V_p, V_p), h2=(N, V_q, V_q),
                    row=lead + (V_p, ), col=(N, V_q))
    for name, t in (('X_q', X_q), ('h1', factors.h1), ('h2', factors.h2),
                    ('row', factors.row), ('col', factors.col)):
        if tuple(t.shape) != tuple(expected[name]):
            raise ValueError(f'{name} must have shape '
                             f'{tuple(expected[name])} for X_p of shape '
                             f'{tuple(X_p.shape)} and X_q of shape '
                             f'{tuple(X_q.shape)}, got {tuple(t.shape)}')
    if min(V_p, V_q, d) < 1:
        raise ValueError(f'V_p, V_q and d must be >= 1, got {V_p}, {V_q}, '
                         f'{d}')
    if torch.is_tensor(beta) and beta.numel() != 1:
        raise ValueError(f'beta must be a number or a one-element tensor, '
                         f'got shape {tuple(beta.shape)}')
    tensors = [X_p, X_q, *factors]
    if pose_weight is not None:
        if (pose_weight.dim() != 3
                or tuple(pose_weight.shape[:2]) != (N, V_q * d)
                or pose_weight.shape[2] < 1):
            raise ValueError(f'pose_weight must have shape (N, V_q * d, O) = '
                             f'({N}, {V_q * d}, O) for X_q of shape '
                             f'{tuple(X_q.shape)}, got '
                             f'{tuple(pose_weight.shape)}')
        tensors.append(pose_weight)
    devices = {t.device for t in tensors}
    if len(devices) > 1:
        raise ValueError(f'all inputs must be on one device, got {devices}')


def cross_cost(X_p: Tensor, X_q: Tensor) -> Tensor:
    """``K[m, n] = 1 - exp(-|X_p[m, i] - X_q[n, j]|^2 / d)`` [M, N, V_p, V_q]
    (:func:`mmhgw.ot.bound_distance` with floor 0: the cross cost is never
    logged), by one matrix product of the embeddings scaled by
    :func:`mmhgw.ot.power_of_two_scale` (exact; no overflow for large
    embeddings, see :func:`mmhgw.ot.scaled_squared_distance`)."""
    M, V_p, d = X_p.shape
    N, V_q, _ = X_q.shape
    a, b = power_of_two_scale(X_p), power_of_two_scale(X_q)
    X_p, X_q = X_p / a, X_q / b
    dot = (X_p.reshape(-1, d) @ X_q.reshape(-1, d).T).view(M, V_p, N,
                                                           V_q).transpose(
                                                               1, 2)
    sq = scaled_squared_distance(
        X_p.pow(2).sum(-1).view(M, 1, V_p, 1),
        X_q.pow(2).sum(-1).view(1, N, 1, V_q), dot, a.view(M, 1, 1, 1),
        b.view(1, N, 1, 1))
    return bound_distance(sq, d, floor=0.0)


def pose_map(parts: Tensor, pose_weight: Tensor) -> Tensor:
    """``vec(parts[..., n]) @ pose_weight[n]`` per type n: parts
    [..., N, V_q, d] and ``pose_weight`` [N, V_q d, O] to poses [..., N, O]."""
    return torch.einsum('...nk,nko->...no', parts.flatten(-2), pose_weight)


def _non_finite(*tensors: Tensor) -> Tensor:
    """[M]: whether row m of any of ``tensors`` (leading dim M) holds a
    non-finite entry."""
    finite = [torch.isfinite(t).flatten(1).all(1) for t in tensors]
    return ~torch.stack(finite).all(0)


def poisoned_problems(X_p: Tensor, X_q: Tensor, h1: Tensor, h2: Tensor,
                      row: Tensor, col: Tensor, beta: Union[float,
                                                            Tensor]) -> Tensor:
    """[M, N]: the problems (m, n) with a NaN or infinite input (flattened
    shapes, the kernels' order). Every backend gives these a NaN plan,
    hence NaN distances, parts and gradients, whatever the arithmetic of
    the non-finite values would make of them."""
    bad = (_non_finite(X_p, h1, row)[:, None]
           | _non_finite(X_q, h2, col)[None, :])
    if torch.is_tensor(beta):
        return bad | ~torch.isfinite(beta).reshape(())
    return bad | (not math.isfinite(beta))


def _nan_where_poisoned(bad: Tensor, X_p, X_q, f: GWFactors, beta) -> Tensor:
    """[M, N]: NaN for the poisoned problems ``bad``, 0 elsewhere, with a
    gradient that is NaN in every input of a poisoned problem and 0 in the
    others (the distance's own gradient would mask some: the cross cost's
    clamp passes none where a squared distance is NaN)."""

    def zeros(t):
        return (t * 0).flatten(1).sum(1)

    z = ((zeros(X_p) + zeros(f.h1) + zeros(f.row))[:, None] +
         (zeros(X_q) + zeros(f.h2) + zeros(f.col))[None, :] + beta * 0)
    return torch.where(bad, math.nan, 0.0) * z


def hgw_routing_reference(X_p: Tensor, X_q: Tensor, *args, eps: float,
                          outer_iters: int, inner_iters: int,
                          regularizer: str = 'proximal', routing: str = 'hgw',
                          chunk_entries: Union[int, str, None] = 'auto',
                          grad: str = 'envelope', return_plan: bool = False,
                          distance_only: bool = False):
    """The specification of the op in plain torch (flattened shapes):
    ``hgw_routing_reference(X_p, X_q, factors, beta, ...)``, or with the
    factors in the kernels' flat order ``(X_p, X_q, h1, h2, row, col, beta,
    ...)``.

    The plan comes from :func:`mmhgw.ot.solve_plan`: with
    ``grad='envelope'`` without autograd, the distance (Eq. 21) and the
    parts then differentiable functions of the inputs at that fixed plan
    (autograd through this function is the envelope gradient); with
    ``'unroll'`` autograd runs through the iterations. A problem with a
    non-finite input gets a NaN plan and a NaN gradient in each of its
    inputs (:func:`poisoned_problems`). Materialises [M, N, V_p, V_q]
    tensors: use it on few locations, or through
    :func:`mmhgw.ops.hgw_routing`.

    Args:
        X_p: [M, V_p, d] components. X_q: [N, V_q, d] subcapsules.
        factors: :class:`mmhgw.ot.GWFactors` with ``row`` [M, V_p],
            ``col`` [N, V_q], ``h1`` [M, V_p, V_p], ``h2`` [N, V_q, V_q].
        beta: weight of the cross cost (float or 0-dim tensor).
        eps, outer_iters, inner_iters, regularizer, grad: as
            :func:`mmhgw.ot.hgw_distance`.
        routing: ``'hgw'``, or ``'uniform'`` (plan ``p q^T``, no solve).
        chunk_entries: as :func:`mmhgw.ot.plan_from_terms` (None: one
            solve over all problems, e.g. for a graph export).
        return_plan: also return the plans.
        distance_only: do not form the parts (None in their place).

    Returns:
        ``(distance [M, N], parts [M, N, V_q, d])``, and the plans
        [M, N, V_p, V_q] third with ``return_plan``.
    """
    factors, beta = factor_args(args)
    V_p, V_q = X_p.shape[1], X_q.shape[1]
    K = cross_cost(X_p, X_q)
    # Locations pair with types: [M, 1, ...] against [1, N, ...].
    terms = GWFactors(factors.row[:, None], factors.col[None],
                      factors.h1[:, None], factors.h2[None]).terms()
    if routing == 'hgw':
        p, q = uniform_marginals(V_p, V_q, K)
        T = solve_plan(terms, K, beta, p, q, grad=grad, eps=eps,
                       outer_iters=outer_iters, inner_iters=inner_iters,
                       regularizer=regularizer, chunk_entries=chunk_entries)
    else:
        T = uniform_plan(K)
    with torch.no_grad():
        bad = poisoned_problems(X_p, X_q, factors.h1, factors.h2, factors.row,
                                factors.col, beta)
        T = torch.where(bad[:, :, None, None], math.nan, T)
    distance = hgw_value(terms, K, T, beta) + _nan_where_poisoned(
        bad, X_p, X_q, factors, beta)
    # Columns of the plan sum to 1 / V_q, hence the factor V_q.
    parts = None if distance_only else V_q * torch.einsum(
        'mnpq,mpd->mnqd', T, X_p)
    return (distance, parts, T) if return_plan else (distance, parts)


def _location_chunks(M: int, N: int, V_p: int, V_q: int):
    """Slices of locations holding about :data:`CPU_CHUNK_ENTRIES` plan
    entries each: bounds the reference's temporaries (and keeps them in
    cache on the CPU)."""
    length = max(1, CPU_CHUNK_ENTRIES // max(1, N * V_p * V_q))
    for start in range(0, M, length):
        yield slice(start, min(M, start + length))


class TorchKernels:
    """The ``'torch'`` backend: :func:`hgw_routing_reference` in chunks of
    locations; in backward it solves again and differentiates the reference
    at the fixed plan. Same interface as the fused backends (flat inputs in
    the kernels' order)."""

    @staticmethod
    def forward(X_p, X_q, h1, h2, row, col, beta, options,
                distance_only=False):
        N, V_q, d = X_q.shape
        dist = X_p.new_empty(X_p.shape[0], N)
        parts = X_p.new_empty(X_p.shape[0], N,
                              *((0, ) if distance_only else (V_q, d)))
        for s in _location_chunks(X_p.shape[0], N, X_p.shape[1], V_q):
            dist[s], chunk_parts = hgw_routing_reference(
                X_p[s], X_q, h1[s], h2, row[s], col, beta,
                distance_only=distance_only, **options)
            if not distance_only:
                parts[s] = chunk_parts
        return dist, parts

    @staticmethod
    def backward(grad_dist, grad_parts, X_p, X_q, h1, h2, row, col, beta,
                 options, want_parts):
        grads = [
            torch.zeros_like(t) for t in (X_p, X_q, h1, h2, row, col, beta)
        ]
        N, V_q, _ = X_q.shape
        parts = (X_p.new_empty(X_p.shape[0], N, V_q, X_q.shape[2])
                 if want_parts else None)
        # An empty grad_parts: no upstream gradient of the parts (the
        # caller did not use them), so only the distance is differentiated.
        distance_only = grad_parts.numel() == 0 and not want_parts
        for s in _location_chunks(X_p.shape[0], N, X_p.shape[1], V_q):

            def outputs(*inputs):
                dist, parts = hgw_routing_reference(
                    *inputs, distance_only=distance_only, **options)
                return (dist, ) if distance_only else (dist, parts)

            # torch.func, not torch.autograd: this runs inside the op's
            # backward kernel, below the autograd dispatch.
            out, vjp = torch.func.vjp(outputs, X_p[s], X_q, h1[s], h2, row[s],
                                      col, beta)
            if distance_only:
                chunk = vjp((grad_dist[s], ))
            else:
                g_parts = (grad_parts[s]
                           if grad_parts.numel() else torch.zeros_like(out[1]))
                chunk = vjp((grad_dist[s], g_parts))
                chunk_parts = out[1]
            if want_parts:
                parts[s] = chunk_parts
            for i, g in enumerate(chunk):
                if i in (0, 2, 4):  # per-location inputs
                    grads[i][s] += g
                else:
                    grads[i] += g
        return grads, parts
