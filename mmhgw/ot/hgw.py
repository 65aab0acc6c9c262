"""Batched Hybrid Gromov-Wasserstein (HGW) solver in the log domain.

Notation follows the paper (Shamsolmoali et al., "Hybrid Gromov-Wasserstein
Embedding for Capsule Learning"): two domains with ``V_p`` and ``V_q``
components, intra-domain matrices ``C_p`` [..., V_p, V_p] and ``C_q``
[..., V_q, V_q], a cross cost ``K`` [..., V_p, V_q] and marginals ``p``, ``q``.
Every function accepts arbitrary leading (batch) dimensions that broadcast
against each other, so one call solves e.g. ``B x L x N`` small problems.

The module is pure torch: no OpenMMLab import.
"""
import math
from typing import NamedTuple, Optional, Tuple, Union

import torch
from torch import Tensor

#: Lower bound of :func:`embedding_distance`. The KL loss takes ``log`` of the
#: structure matrices, and with ``beta = 1`` (ablation C) those are pure
#: embedding distances whose diagonal would otherwise be exactly 0.
DISTANCE_FLOOR = 1e-2

LOSSES = ('kl', 'square')
REGULARIZERS = ('proximal', 'entropic')
GRAD_MODES = ('envelope', 'unroll')

#: Plan entries per chunk of a CPU solve (4 MiB in float32): a proximal step
#: makes ~20 elementwise passes over its chunk, which then stay in cache
#: instead of streaming from memory; tensors above glibc's 32 MiB mmap
#: ceiling would also be mapped, page-faulted and unmapped on every pass.
#: Measured 2.7x faster on 134k problems of 32 x 8 (docs/benchmarks.md).
CPU_CHUNK_ENTRIES = 2**20

#: Smallest ``eps`` of the solver: ``2^-63`` (about 1.1e-19). The
#: log-kernel ``-cost / eps`` then stays below ``2^63 |cost|`` in magnitude:
#: finite in float32 for every cost below 3.7e19 (the structures and cross
#: costs are bounded by a few units), summed over proximal steps without
#: overflow, and far above the padding value -1e30 of the Triton kernels.
#: Smaller values underflow or overflow float32 iterates into NaN (1e-300
#: is 0 in float32).
MIN_EPS = 2.0**-63


def safe_log(x: Tensor) -> Tensor:
    """``log(x)`` with ``x`` clamped to the dtype's smallest normal number.

    This is the one floor applied where a log meets a zero (zero marginal
    entries, vanishing plan entries): ``log(0) = -inf`` would turn a row of the
    log-domain Sinkhorn into ``-inf - (-inf) = NaN``; the floor keeps it
    finite (about -87.3 in float32, -708.4 in float64), i.e. a zero-mass row
    keeps a mass below anything the dtype can add to a sum.
    """
    return torch.log(x.clamp_min(torch.finfo(x.dtype).tiny))


def exp_floor(dtype: torch.dtype) -> float:
    """Smallest exponent :func:`floored_exp` evaluates: ``log(tiny) / 2``.

    ``exp`` of it is ``sqrt(tiny)`` (1e-19 in float32, 1e-154 in float64),
    so not only every floored value but also the product of two of them is
    a normal number. Subnormal numbers take a microcode path about 10x
    slower on x86, in ``exp`` itself and in every later product: the
    Sinkhorn scalings multiply the kernel entries, and with a floor at
    ``tiny`` the batched matrix products of the kernel-domain iterations
    ran 4x slower once ``beta > 0`` pushed most entries to the floor.
    """
    return 0.5 * math.log(torch.finfo(dtype).tiny)


def floored_exp(x: Tensor) -> Tensor:
    """``exp(x)`` with ``x`` clamped at :func:`exp_floor` of its dtype.

    Below the floor the result is negligible anyway: clamping changes a sum
    of ``n`` terms by at most ``n sqrt(tiny)`` (absolute), far below the
    dtype's resolution of the masses summed here (>= 1e-3), and keeps
    ``exp`` and the products after it fast on the ``-cost / eps`` logits of
    ``eps = 1e-3``, most of which underflow.
    """
    return torch.exp(x.clamp_min(exp_floor(x.dtype)))


def logsumexp(x: Tensor, dim: int) -> Tensor:
    """``log(sum(exp(x), dim))``, max-shifted, through :func:`floored_exp`.

    Inputs are finite (every log in this module goes through
    :func:`safe_log`), so the shift is finite.
    """
    m = x.amax(dim, keepdim=True)
    return torch.log(floored_exp(x - m).sum(dim)) + m.squeeze(dim)


class GWTerms(NamedTuple):
    """Peyre's decomposition of ``L(C_p, C_q) (x) T`` (paper Eq. 10).

    ``L(C_p, C_q) (x) T = const - h1 @ T @ h2t`` with
    ``const = f1(C_p) p 1^T + 1 (f2(C_q) q)^T`` [..., V_p, V_q],
    ``h1 = h1(C_p)`` [..., V_p, V_p] and ``h2t = h2(C_q)^T`` [..., V_q, V_q].
    """
    const: Tensor
    h1: Tensor
    h2t: Tensor


def gw_factors(C_p: Tensor, C_q: Tensor, p: Tensor, q: Tensor,
               loss: str = 'kl') -> Tuple[Tensor, Tensor, Tensor, Tensor]:
    """The plan-independent factors of the GW tensor product (Eq. 10).

    Loss decompositions ``L(a, b) = f1(a) + f2(b) - h1(a) h2(b)``:

    - ``'kl'``: ``L(a, b) = a log(a / b) - a + b``;
      ``f1(a) = a log a - a``, ``f2(b) = b``, ``h1(a) = a``, ``h2(b) = log b``.
      Requires ``C_p, C_q > 0``.
    - ``'square'``: ``L(a, b) = (a - b)^2``;
      ``f1(a) = a^2``, ``f2(b) = b^2``, ``h1(a) = a``, ``h2(b) = 2 b``.

    Args:
        C_p: [..., V_p, V_p]. C_q: [..., V_q, V_q].
        p: [..., V_p] source marginal. q: [..., V_q] target marginal.
        loss: ``'kl'`` or ``'square'``.

    Returns:
        ``(row, col, h1, h2)``: ``row = f1(C_p) p`` [..., V_p],
        ``col = f2(C_q) q`` [..., V_q], ``h1 = h1(C_p)`` [..., V_p, V_p] and
        ``h2 = h2(C_q)`` [..., V_q, V_q], so that
        ``L (x) T = row 1^T + 1 col^T - h1 T h2^T``.
    """
    if loss == 'kl':
        f1 = C_p * torch.log(C_p) - C_p
        f2 = C_q
        h2 = torch.log(C_q)
    elif loss == 'square':
        f1 = C_p * C_p
        f2 = C_q * C_q
        h2 = 2 * C_q
    else:
        raise ValueError(f'loss must be one of {LOSSES}, got {loss!r}')
    row = (f1 @ p.unsqueeze(-1)).squeeze(-1)
    col = (f2 @ q.unsqueeze(-1)).squeeze(-1)
    return row, col, C_p, h2


def gw_terms(C_p: Tensor, C_q: Tensor, p: Tensor, q: Tensor,
             loss: str = 'kl') -> GWTerms:
    """:class:`GWTerms` of :func:`gw_factors` (same arguments), with the
    constant expanded to [..., V_p, V_q]."""
    row, col, h1, h2 = gw_factors(C_p, C_q, p, q, loss)
    return GWTerms(row.unsqueeze(-1) + col.unsqueeze(-2), h1,
                   h2.transpose(-1, -2))


def gw_apply(terms: GWTerms, T: Tensor) -> Tensor:
    """``L(C_p, C_q) (x) T`` from precomputed :class:`GWTerms` (Eq. 10).

    ``einsum`` rather than ``@``: a broadcast dim (``h1`` shared by every
    subcapsule, ``h2t`` by every location) is folded into the matrix product
    instead of being expanded into many tiny batched products.
    """
    h1_T = torch.einsum('...ij,...jk->...ik', terms.h1, T)
    return terms.const - torch.einsum('...ij,...jk->...ik', h1_T, terms.h2t)


def gw_tensor_product(C_p: Tensor, C_q: Tensor, T: Tensor, *,
                      loss: str = 'kl', p: Optional[Tensor] = None,
                      q: Optional[Tensor] = None) -> Tensor:
    """The GW tensor product ``L(C_p, C_q) (x) T`` of paper Eq. 8 / Eq. 10.

    ``[L (x) T]_{j j'} = sum_{i i'} L(C_p[i, j], C_q[i', j']) T[i, i']`` for
    symmetric ``C``; computed in ``O(V^3)`` through Eq. 10 instead of the
    ``O(V^4)`` sum. Eq. 10 holds for ``T`` in ``Gamma(p, q)``: ``p`` and ``q``
    default to the marginals of ``T``.

    Args:
        C_p: [..., V_p, V_p]. C_q: [..., V_q, V_q]. T: [..., V_p, V_q].
        loss: ``'kl'`` or ``'square'`` (see :func:`gw_terms`).

    Returns:
        [..., V_p, V_q].
    """
    p = T.sum(-1) if p is None else p
    q = T.sum(-2) if q is None else q
    return gw_apply(gw_terms(C_p, C_q, p, q, loss), T)


def embedding_distance(X: Tensor, Y: Tensor,
                       floor: float = DISTANCE_FLOOR) -> Tensor:
    """Bounded pairwise distance ``k(x, y)`` used for ``K`` (paper Eq. 21-22).

    ``k(x, y) = floor + (1 - floor) * (1 - exp(-||x - y||^2 / d))``.

    Chosen so that ``k`` lies in ``[floor, 1)``: bounded like the Zipf matrix
    of Eq. 18 it is mixed with, strictly positive so the KL loss may take its
    log, and smooth at ``x = y`` (the squared norm has no square root, hence
    no NaN gradient at zero distance). Dividing by the embedding size ``d``
    keeps the scale independent of ``d``.

    Args:
        X: [..., V, d]. Y: [..., W, d].

    Returns:
        [..., V, W].
    """
    a, b = power_of_two_scale(X), power_of_two_scale(Y)
    X, Y = X / a, Y / b
    sq = scaled_squared_distance((X * X).sum(-1).unsqueeze(-1),
                                 (Y * Y).sum(-1).unsqueeze(-2),
                                 X @ Y.transpose(-1, -2), a, b)
    return bound_distance(sq, X.shape[-1], floor)


def power_of_two_scale(X: Tensor) -> Tensor:
    """``2^k`` [..., 1, 1] per matrix of ``X`` [..., V, d]: the largest
    power of two not above ``max |X|``, and 1 when that is below 2.

    Dividing by a power of two is exact, so the squared distances of
    :func:`scaled_squared_distance` equal the plain expansion bit for bit
    wherever that does not overflow; embeddings of magnitude 1.8e19 and
    more (whose squares overflow float32) get the finite distances a
    convolution's output would. Constant (no gradient).
    """
    with torch.no_grad():
        top = X.detach().abs().amax((-1, -2), keepdim=True)
        return torch.exp2(torch.floor(torch.log2(top)).clamp_min(0))


def scaled_squared_distance(sq_x: Tensor, sq_y: Tensor, dot: Tensor,
                            scale_x: Tensor, scale_y: Tensor) -> Tensor:
    """``|x - y|^2`` from the scaled embeddings ``x' = x / scale_x``,
    ``y' = y / scale_y`` (:func:`power_of_two_scale`): their squared norms
    ``sq_x``, ``sq_y``, products ``dot = x' . y'``, all broadcasting.

    With ``c = max(scale_x, scale_y)``, ``r_x = scale_x / c`` and
    ``r_y = scale_y / c`` (powers of two <= 1):
    ``|x - y|^2 = (r_x^2 |x'|^2 + r_y^2 |y'|^2 - 2 r_x r_y x' . y') c c``,
    the bracket at most a few units per entry; the final products overflow
    to ``inf`` (a cross cost of exactly 1), never to NaN.
    """
    c = torch.maximum(scale_x, scale_y)
    r_x, r_y = scale_x / c, scale_y / c
    sq = (r_x * r_x) * sq_x + (r_y * r_y) * sq_y - 2 * (r_x * r_y) * dot
    return sq * c * c


def bound_distance(sq: Tensor, d: int,
                   floor: float = DISTANCE_FLOOR) -> Tensor:
    """The map of :func:`embedding_distance` from squared distances ``sq``
    between ``d``-dimensional embeddings; negative round-off is clamped."""
    return floor + (1 - floor) * (-torch.expm1(-sq.clamp_min(0) / d))


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
            rows = logsumexp(
                log_kernel + f.unsqueeze(-1) + g.unsqueeze(-2), dim=-1)
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
    most twice its marginal error (l1). A few Sinkhorn iterations at
    ``eps = 1e-3`` leave row errors of ~1e-2; this makes every returned plan
    feasible with no extra iteration and no host synchronisation.

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


class HGWResult(NamedTuple):
    """Output of :func:`hgw_distance`.

    ``distance``: [...] the HGW value of Eq. 21 (without the regulariser E)
    at the computed plan. ``plan``: [..., V_p, V_q].
    """
    distance: Tensor
    plan: Tensor


def hgw_value(terms: GWTerms, K: Tensor, T: Tensor,
              beta: Union[float, Tensor]) -> Tensor:
    """``<L(C_p, C_q) (x) T, T> + beta <K, T>`` (paper Eq. 21 / Eq. 24)."""
    return ((gw_apply(terms, T) + beta * K) * T).sum((-1, -2))


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
        if value not in allowed:
            raise ValueError(f'{name} must be one of {allowed}, got {value!r}')
    for name, value in (('outer_iters', outer_iters),
                        ('inner_iters', inner_iters)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f'{name} must be a positive int, got {value!r}')
    # Written so that NaN fails too (every comparison with NaN is False).
    if isinstance(eps, bool) or not (isinstance(eps, (int, float))
                                     and MIN_EPS <= eps < math.inf):
        raise ValueError(f'eps must be a finite number >= {MIN_EPS:.3g} '
                         f'(below, float32 iterations overflow), got '
                         f'{eps!r}')


def _check_inputs(C_p, C_q, K, p, q, beta, eps, outer_iters, inner_iters,
                  loss, regularizer, grad, tol, check_values,
                  chunk_entries=None):
    if not (chunk_entries is None or chunk_entries == 'auto' or (
            isinstance(chunk_entries, int) and chunk_entries > 0)):
        raise ValueError(f"chunk_entries must be 'auto', None or a positive "
                         f'int, got {chunk_entries!r}')
    if loss not in LOSSES:
        raise ValueError(f'loss must be one of {LOSSES}, got {loss!r}')
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


def _uniform(V: int, like: Tensor) -> Tensor:
    return torch.full((V, ), 1.0 / V, dtype=like.dtype, device=like.device)


def _scaling_iterations(log_kernel, f, g, p, q, n_iters):
    """Sinkhorn iterations in the kernel domain, from log potentials.

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


def _proximal_iterations(terms, K, beta, p, q, eps, outer_iters,
                         inner_iters, proximal, tol, batch_shape):
    """The outer loop of Algorithm 1 (Eq. 25 / 25a); returns the plan.

    Each proximal step starts with one log-domain Sinkhorn iteration, exact
    for any ``eps``. In oracle mode (``tol`` set) the rest stay in the log
    domain; with fixed counts (the hot path) the remaining
    ``inner_iters - 1`` run in the kernel domain (:func:`_scaling_iterations`),
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
                T, f, g = _scaling_iterations(log_kernel, f, g, p, q,
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


def _narrow_batch(t, core: int, axis_from_end: int, start: int,
                  length: int):
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
    batch_shape = torch.broadcast_shapes(
        terms.const.shape[:-2], terms.h1.shape[:-2], terms.h2t.shape[:-2],
        K.shape[:-2], p.shape[:-1], q.shape[:-1])
    proximal = regularizer == 'proximal'
    if chunk_entries == 'auto':
        chunk_entries = CPU_CHUNK_ENTRIES if K.device.type == 'cpu' else None
    split = None if tol is not None else _chunk_split(
        batch_shape, V_p * V_q, chunk_entries)

    def solve_one(terms, K, beta, p, q, batch_shape):
        T = _proximal_iterations(terms, K, beta, p, q, eps, outer_iters,
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
        plans.append(solve_one(
            GWTerms(*(cut(t, 2) for t in terms)), cut(K, 2), cut(beta, 2),
            cut(p, 1), cut(q, 1), torch.Size(shape)))
    return torch.cat(plans, dim=from_end - 2)


def _solve(C_p, C_q, K, beta, eps, outer_iters, inner_iters, loss,
           regularizer, grad, p, q, tol, check_values, chunk_entries):
    """Validated, dtype-promoted solve shared by :func:`hgw_distance` and
    :func:`hgw_plan`: ``(terms, K, plan, beta)`` with the GW terms built
    once (detached for the iterations in envelope mode)."""
    _check_inputs(C_p, C_q, K, p, q, beta, eps, outer_iters, inner_iters,
                  loss, regularizer, grad, tol, check_values, chunk_entries)
    V_p, V_q = C_p.shape[-1], C_q.shape[-1]
    dtype = torch.promote_types(torch.promote_types(C_p.dtype, C_q.dtype),
                                K.dtype)
    C_p, C_q, K = C_p.to(dtype), C_q.to(dtype), K.to(dtype)
    p = _uniform(V_p, K) if p is None else p.to(dtype)
    q = _uniform(V_q, K) if q is None else q.to(dtype)
    # The plan-independent terms are built once: iterated on (detached in
    # envelope mode) and differentiated in the final value.
    terms = gw_terms(C_p, C_q, p, q, loss)
    options = dict(eps=eps, outer_iters=outer_iters, inner_iters=inner_iters,
                   regularizer=regularizer, tol=tol,
                   chunk_entries=chunk_entries)
    if grad == 'unroll':
        T = plan_from_terms(terms, K, beta, p, q, **options)
    else:
        with torch.no_grad():
            T = plan_from_terms(
                GWTerms(*(t.detach() for t in terms)), K.detach(),
                beta.detach() if torch.is_tensor(beta) else beta, p, q,
                **options)
    return terms, K, T, beta


def hgw_distance(C_p: Tensor, C_q: Tensor, K: Tensor, *,
                 beta: Union[float, Tensor], eps: float = 1e-3,
                 outer_iters: int, inner_iters: int, loss: str = 'kl',
                 regularizer: str = 'proximal', grad: str = 'envelope',
                 p: Optional[Tensor] = None, q: Optional[Tensor] = None,
                 tol: Optional[float] = None,
                 check_values: bool = True,
                 chunk_entries: Union[int, str, None] = 'auto'
                 ) -> HGWResult:
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
    warm-started across
    proximal steps (at a fixed point the increments repeat), and
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
    this keeps each slice's temporaries in cache (2.7x faster at the
    layer's sizes, see :data:`CPU_CHUNK_ENTRIES`); on a GPU one launch over
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
    terms, K, T, beta = _solve(C_p, C_q, K, beta, eps, outer_iters,
                               inner_iters, loss, regularizer, grad, p, q,
                               tol, check_values, chunk_entries)
    return HGWResult(hgw_value(terms, K, T, beta), T)


def hgw_plan(C_p: Tensor, C_q: Tensor, K: Tensor, *,
             beta: Union[float, Tensor], eps: float = 1e-3,
             outer_iters: int, inner_iters: int, loss: str = 'kl',
             regularizer: str = 'proximal', grad: str = 'envelope',
             p: Optional[Tensor] = None, q: Optional[Tensor] = None,
             tol: Optional[float] = None, check_values: bool = True,
             chunk_entries: Union[int, str, None] = 'auto') -> Tensor:
    """The plan of :func:`hgw_distance` (same arguments) without the
    distance, for callers that evaluate the value themselves."""
    return _solve(C_p, C_q, K, beta, eps, outer_iters, inner_iters, loss,
                  regularizer, grad, p, q, tol, check_values,
                  chunk_entries)[2]


def mix_structure(C_obs: Tensor, C_emb: Tensor,
                  beta: Union[float, Tensor]) -> Tensor:
    """``C(X) = (1 - beta) C_obs + beta K(X, X)`` (paper, below Eq. 21).

    Both inputs in ``(0, 1]`` keep the mixture in ``(0, 1]`` for any
    ``beta`` in ``[0, 1]``.
    """
    return (1 - beta) * C_obs + beta * C_emb


def kl_matrix_divergence(A: Tensor, B: Tensor) -> Tensor:
    """``L(A, B) = sum_ij A log(A / B) - A + B`` over the last two dims.

    The generalised KL loss of Sec. 4 summed over matrix entries, as used by
    the regulariser E (Eq. reg). ``A, B > 0``; logs go through
    :func:`safe_log`.
    """
    return (A * (safe_log(A) - safe_log(B)) - A + B).sum((-1, -2))
