"""The HGW solver (paper Eq. 21, 24, 25, Algorithm 1): option checks,
batched solves in chunks, and the value at the plan.

Shapes: ``C_p`` [..., V_p, V_p], ``C_q`` [..., V_q, V_q], ``K`` [..., V_p,
V_q], marginals [..., V_p], [..., V_q]; leading dims broadcast, so one call
solves e.g. ``B x L x N`` small problems. Pure torch.
"""
import math
from typing import NamedTuple, Optional, Tuple, Union

import torch
from torch import Tensor

from mmhgw.arg_checks import check_choice, check_int
from .gw_terms import LOSSES, GWTerms, gw_terms, hgw_value
from .numerics import MIN_EPS
from .sinkhorn import proximal_iterations, round_to_polytope

REGULARIZERS = ('proximal', 'entropic')
GRAD_MODES = ('envelope', 'unroll')

#: Plan entries per chunk of a CPU solve (4 MiB in float32): a proximal step
#: makes ~20 elementwise passes over its chunk, which then stay in cache
#: instead of streaming from memory; tensors above glibc's 32 MiB mmap
#: ceiling would also be mapped, page-faulted and unmapped on every pass
#: (measured in docs/benchmarks.md).
CPU_CHUNK_ENTRIES = 2**20


class HGWResult(NamedTuple):
    """Output of :func:`hgw_distance`.

    ``distance``: [...] the HGW value of Eq. 21 (without the regulariser E)
    at the computed plan. ``plan``: [..., V_p, V_q].
    """
    distance: Tensor
    plan: Tensor


def check_solver_options(*, eps, outer_iters, inner_iters,
                         regularizer='proximal', grad='envelope'):
    """Raise a ValueError naming the first invalid solver option.

    The one check of the options shared by :func:`hgw_distance`, the
    routing op (:func:`mmhgw.ops.hgw_routing`) and the capsule layer (at
    build): ``eps`` a finite number >= :data:`MIN_EPS`, positive int
    iteration counts, a known ``regularizer`` and ``grad``.
    """
    for name, value, allowed in (('regularizer', regularizer, REGULARIZERS),
                                 ('grad', grad, GRAD_MODES)):
        check_choice(name, value, allowed)
    check_int('outer_iters', outer_iters)
    check_int('inner_iters', inner_iters)
    # Written so that NaN fails too (every comparison with NaN is False).
    if isinstance(eps, bool) or not (isinstance(eps, (int, float))
                                     and MIN_EPS <= eps < math.inf):
        raise ValueError(f'eps must be a finite number >= {MIN_EPS:.3g} '
                         f'(below, float32 iterations overflow), got '
                         f'{eps!r}')


def _check_inputs(C_p, C_q, K, p, q, beta, eps, outer_iters, inner_iters, loss,
                  regularizer, grad, tol, check_values, chunk_entries=None):
    if not (chunk_entries is None or chunk_entries == 'auto' or
            (isinstance(chunk_entries, int) and chunk_entries > 0)):
        raise ValueError(f"chunk_entries must be 'auto', None or a positive "
                         f'int, got {chunk_entries!r}')
    check_choice('loss', loss, LOSSES)
    check_solver_options(eps=eps, outer_iters=outer_iters,
                         inner_iters=inner_iters, regularizer=regularizer,
                         grad=grad)
    if tol is not None and not tol > 0:
        raise ValueError(f'tol must be None or > 0, got {tol!r}')
    for name, M in (('C_p', C_p), ('C_q', C_q), ('K', K)):
        if M.dim() < 2:
            raise ValueError(f'{name} must have at least 2 dims, '
                             f'got shape {tuple(M.shape)}')
    for name, M in (('C_p', C_p), ('C_q', C_q)):
        if M.shape[-1] != M.shape[-2]:
            raise ValueError(f'{name} must be square in its last two dims, '
                             f'got shape {tuple(M.shape)}')
    V_p, V_q = C_p.shape[-1], C_q.shape[-1]
    if V_p < 1 or V_q < 1:
        raise ValueError(f'C_p and C_q must have at least one component, '
                         f'got V_p={V_p}, V_q={V_q}')
    if K.shape[-2:] != (V_p, V_q):
        raise ValueError(f'K must end in (V_p, V_q) = ({V_p}, {V_q}), '
                         f'got shape {tuple(K.shape)}')
    for name, m, V in (('p', p, V_p), ('q', q, V_q)):
        if m is not None and (m.dim() < 1 or m.shape[-1] != V):
            raise ValueError(f'{name} must end in {V}, '
                             f'got shape {tuple(m.shape)}')
    try:
        shapes = [C_p.shape[:-2], C_q.shape[:-2], K.shape[:-2]]
        shapes += [m.shape[:-1] for m in (p, q) if m is not None]
        batch = torch.broadcast_shapes(*shapes)
    except RuntimeError as err:
        raise ValueError('leading dims of C_p, C_q, K (and p, q) must '
                         f'broadcast: {err}') from None
    if torch.is_tensor(beta):
        # beta scales K [..., V_p, V_q]: it must broadcast to that shape
        # without enlarging it.
        full = batch + (V_p, V_q)
        try:
            fits = torch.broadcast_shapes(beta.shape, full) == full
        except RuntimeError:
            fits = False
        if not fits:
            raise ValueError(f'beta of shape {tuple(beta.shape)} does not '
                             f'broadcast to [..., V_p, V_q] = '
                             f'{tuple(full)}')
    if not check_values:
        return
    if loss == 'kl':
        for name, M in (('C_p', C_p), ('C_q', C_q)):
            if not bool((M > 0).all()):
                raise ValueError(f"{name} must be strictly positive with "
                                 f"loss='kl' (the loss takes its log)")
    for name, M in (('C_p', C_p), ('C_q', C_q), ('K', K)):
        if not bool(torch.isfinite(M).all()):
            raise ValueError(f'{name} must be finite')
    for name, m in (('p', p), ('q', q)):
        if m is not None and not bool((m >= 0).all()):
            raise ValueError(f'{name} must be non-negative')
    if p is not None and q is not None:
        if not torch.allclose(p.sum(-1), q.sum(-1), rtol=1e-4, atol=1e-6):
            raise ValueError('p and q must have equal total mass')


def uniform_marginals(V_p: int, V_q: int,
                      like: Tensor) -> Tuple[Tensor, Tensor]:
    """``p = 1 / V_p`` [V_p] and ``q = 1 / V_q`` [V_q], in ``like``'s dtype
    and device: the marginals of every problem of the capsule layer."""
    return (like.new_full((V_p, ), 1.0 / V_p), like.new_full((V_q, ),
                                                             1.0 / V_q))


def uniform_plan(like: Tensor) -> Tensor:
    """The plan ``p q^T = 1 / (V_p V_q)`` of uniform marginals, an expanded
    view with ``like``'s shape [..., V_p, V_q] (no optimal transport: the
    ``'uniform'`` routing)."""
    V_p, V_q = like.shape[-2:]
    return like.new_full((1, ), 1.0 / (V_p * V_q)).expand(like.shape)


def _chunk_split(batch_shape: torch.Size, entries_per_problem: int,
                 chunk_entries: Optional[int]) -> Optional[Tuple[int, int]]:
    """``(axis, length)``: split the batch along its largest axis into
    slices of ``length`` holding at most ``chunk_entries`` plan entries
    (at least one slice each); None when one chunk holds everything."""
    total = math.prod(batch_shape) * entries_per_problem
    if chunk_entries is None or total <= chunk_entries or not batch_shape:
        return None
    axis = max(range(len(batch_shape)), key=lambda i: batch_shape[i])
    length = max(1, chunk_entries * batch_shape[axis] // total)
    return None if length >= batch_shape[axis] else (axis, length)


def _narrow_batch(t, core: int, axis_from_end: int, start: int, length: int):
    """Slice ``t`` (``core`` trailing non-batch dims) along the batch axis
    ``axis_from_end`` (negative, counted from the last batch dim), unless
    ``t`` broadcasts along it."""
    if not torch.is_tensor(t):
        return t
    axis = t.dim() - core + axis_from_end
    if axis < 0 or t.shape[axis] == 1:
        return t
    return t.narrow(axis, start, min(length, t.shape[axis] - start))


def plan_from_terms(terms: GWTerms, K: Tensor, beta: Union[float, Tensor],
                    p: Tensor, q: Tensor, *, eps: float, outer_iters: int,
                    inner_iters: int, regularizer: str = 'proximal',
                    tol: Optional[float] = None,
                    chunk_entries: Union[int, str, None] = 'auto') -> Tensor:
    """The rounded plan of Algorithm 1 from prepared :class:`GWTerms`.

    Differentiable through the iterations when its inputs require grad
    (``grad='unroll'``); callers wanting the envelope gradient pass detached
    inputs. Options as :func:`hgw_distance`; inputs are not validated.
    """
    V_p, V_q = K.shape[-2:]
    batch_shape = torch.broadcast_shapes(terms.const.shape[:-2],
                                         terms.h1.shape[:-2],
                                         terms.h2t.shape[:-2], K.shape[:-2],
                                         p.shape[:-1], q.shape[:-1])
    proximal = regularizer == 'proximal'
    if chunk_entries == 'auto':
        chunk_entries = CPU_CHUNK_ENTRIES if K.device.type == 'cpu' else None
    split = None if tol is not None else _chunk_split(batch_shape, V_p *
                                                      V_q, chunk_entries)

    def solve_one(terms, K, beta, p, q, batch_shape):
        T = proximal_iterations(terms, K, beta, p, q, eps, outer_iters,
                                inner_iters, proximal, tol, batch_shape)
        return round_to_polytope(T, p, q)

    if split is None:
        return solve_one(terms, K, beta, p, q, batch_shape)
    axis, length = split
    from_end = axis - len(batch_shape)
    plans = []
    for start in range(0, batch_shape[axis], length):

        def cut(t, core):
            return _narrow_batch(t, core, from_end, start, length)

        shape = list(batch_shape)
        shape[axis] = min(length, batch_shape[axis] - start)
        plans.append(
            solve_one(GWTerms(*(cut(t, 2) for t in terms)), cut(K, 2),
                      cut(beta, 2), cut(p, 1), cut(q, 1), torch.Size(shape)))
    return torch.cat(plans, dim=from_end - 2)


def solve_plan(terms: GWTerms, K: Tensor, beta: Union[float,
                                                      Tensor], p: Tensor,
               q: Tensor, *, grad: str = 'envelope', **options) -> Tensor:
    """:func:`plan_from_terms` with the gradient mode ``grad``:
    ``'unroll'`` differentiates through the iterations; ``'envelope'``
    iterates without autograd on detached inputs (memory of one plan
    whatever the iteration count), for a value then differentiated at the
    fixed plan."""
    if grad == 'unroll':
        return plan_from_terms(terms, K, beta, p, q, **options)
    with torch.no_grad():
        return plan_from_terms(
            GWTerms(*(t.detach() for t in terms)), K.detach(),
            beta.detach() if torch.is_tensor(beta) else beta, p, q, **options)


def hgw_distance(C_p: Tensor, C_q: Tensor, K: Tensor, *,
                 beta: Union[float, Tensor], eps: float = 1e-3,
                 outer_iters: int, inner_iters: int, loss: str = 'kl',
                 regularizer: str = 'proximal', grad: str = 'envelope',
                 p: Optional[Tensor] = None, q: Optional[Tensor] = None,
                 tol: Optional[float] = None, check_values: bool = True,
                 chunk_entries: Union[int, str, None] = 'auto') -> HGWResult:
    """Hybrid Gromov-Wasserstein distance and plan (paper Eq. 21, 24, 25).

    Solves ``min_{T in Gamma(p, q)} <L(C_p, C_q) (x) T, T> + beta <K, T>``
    by the proximal-point method of Algorithm 1: from ``T_0 = p q^T``, each
    of ``outer_iters`` steps forms the cost
    ``L(C_p, C_q) (x) T_{v-1} + beta K`` (Eq. 25a) and projects
    ``T_{v-1} * exp(-cost / eps)`` onto ``Gamma(p, q)`` with
    ``inner_iters`` log-domain Sinkhorn iterations (Eq. 25). With
    ``regularizer='entropic'`` (the paper's ablation A) the proximal factor
    ``T_{v-1}`` is dropped: each step solves the entropic problem
    ``<cost, T> - eps H(T)``.

    Numerics: ``log T`` and the Sinkhorn potentials are carried throughout
    (never ``log(exp(.))``); each proximal step opens with a log-domain
    Sinkhorn iteration and, with fixed counts, continues in the stabilised
    kernel domain (one ``exp`` per entry per step); the column potential is
    warm-started across proximal steps (at a fixed point the increments
    repeat), and
    :func:`safe_log` is the only floor. ``tol=None`` runs the exact iteration
    counts with no host synchronisation; a float stops the outer loop once
    the plan moves less than ``tol`` (max abs), and each Sinkhorn once its
    row marginals are within ``tol`` (both counts become maxima).

    Gradients: ``grad='envelope'`` iterates under ``no_grad`` and
    differentiates the value at the detached plan, i.e. only through ``C_p``,
    ``C_q``, ``K`` and ``beta`` (exact at a converged plan by the envelope
    theorem; memory of one plan whatever the iteration count).
    ``grad='unroll'`` backpropagates through every iteration.

    Chunking: with fixed counts the iterations run over slices of the batch
    of at most ``chunk_entries`` plan entries each (problems are
    independent, so the result is the same up to float round-off). On a CPU
    this keeps each slice's temporaries in cache (see
    :data:`CPU_CHUNK_ENTRIES`); on a GPU one launch over
    the whole batch is faster, so ``'auto'`` chunks only on the CPU.

    Args:
        C_p: [..., V_p, V_p] input structure matrix (positive for ``'kl'``).
        C_q: [..., V_q, V_q] subcapsule structure matrix.
        K: [..., V_p, V_q] cross cost. Leading dims of the three broadcast.
        beta: weight of the Wasserstein term; float or tensor broadcasting
            against [..., V_p, V_q].
        eps: proximal / entropic strength (> 0; paper: 1e-3).
        outer_iters, inner_iters: proximal steps and Sinkhorn iterations.
        loss: ``'kl'`` (paper) or ``'square'``.
        regularizer: ``'proximal'`` (paper) or ``'entropic'`` (ablation A).
        grad: ``'envelope'`` or ``'unroll'``.
        p, q: [..., V_p], [..., V_q] marginals; uniform if None.
        tol: None for fixed counts, else the stopping tolerance.
        check_values: validate values (positivity, finiteness, masses); this
            synchronises with the device, so hot paths that build valid inputs
            by construction turn it off. Shapes and options are always
            checked.
        chunk_entries: plan entries per chunk of the iterations; ``'auto'``
            (:data:`CPU_CHUNK_ENTRIES` on the CPU, no chunking elsewhere),
            a positive int, or None (never chunk). Ignored when ``tol`` is
            set (its stopping test is over the whole batch).

    Returns:
        :class:`HGWResult` with ``distance`` [...] and ``plan``
        [..., V_p, V_q]; the plan is detached in envelope mode.
    """
    _check_inputs(C_p, C_q, K, p, q, beta, eps, outer_iters, inner_iters, loss,
                  regularizer, grad, tol, check_values, chunk_entries)
    V_p, V_q = C_p.shape[-1], C_q.shape[-1]
    dtype = torch.promote_types(torch.promote_types(C_p.dtype, C_q.dtype),
                                K.dtype)
    C_p, C_q, K = C_p.to(dtype), C_q.to(dtype), K.to(dtype)
    uniform_p, uniform_q = uniform_marginals(V_p, V_q, K)
    p = uniform_p if p is None else p.to(dtype)
    q = uniform_q if q is None else q.to(dtype)
    # The plan-independent terms are built once: iterated on (detached in
    # envelope mode) and differentiated in the final value.
    terms = gw_terms(C_p, C_q, p, q, loss)
    T = solve_plan(terms, K, beta, p, q, grad=grad, eps=eps,
                   outer_iters=outer_iters, inner_iters=inner_iters,
                   regularizer=regularizer, tol=tol,
                   chunk_entries=chunk_entries)
    return HGWResult(hgw_value(terms, K, T, beta), T)
