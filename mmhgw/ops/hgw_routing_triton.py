"""Triton kernels of the HGW routing op (:mod:`mmhgw.ops.hgw_routing`).

The specification is :func:`mmhgw.ops.hgw_routing_reference`: the same
iterates, floors and rounding as ``mmhgw/ops/csrc/hgw_routing_kernel.h``.

Layout: one program holds one ``V_p x V_q`` problem in registers, as 2-D
blocks padded to powers of two (``BP``, ``BQ``; ``BD`` for the embedding
size) with masks. Padded entries of the log-kernel are set to ``NEG``
(finite: ``-inf - (-inf)`` would be NaN in the max-shifted sums) and
padded entries of every ``exp`` and of the plan to 0, so they add nothing
to a sum. The problems are far below ``tl.dot``'s minimum sizes (``V_q`` is
8), so the small matrix products are broadcast products reduced by
``tl.sum``.

- forward: one program per (location m, type n): the cross cost, the
  proximal-point solve (Eq. 25 / 25a), the value (Eq. 21) and the parts
  ``V_q T^T X_p[m]``.
- backward: one program per location, looping over the types: the plan is
  solved again and the envelope gradient taken at it. The per-location
  gradients (``dX_p``, ``dh1``, ``drow``) accumulate in registers and are
  written once; the per-type ones (``dX_q``, ``dh2``, ``dcol``, ``dbeta``)
  are written per (location, type) into partial buffers that torch sums
  over the locations: deterministic, no atomics, and bounded by running
  the locations in chunks.

Numerics: dtype-dependent constants (``eps``, marginals and their logs, the
floors of :func:`mmhgw.ot.safe_log` and :func:`mmhgw.ot.exp_floor`) enter as
compile-time constants, materialised in the kernel's dtype exactly as torch
rounds the reference's Python scalars; ``beta`` is read from its tensor
(no host synchronisation). float32 divisions use ``tl.div_rn``: Triton's
default float32 division on NVIDIA GPUs is approximate.

Speed: correct on an H100 but latency-bound there (``docs/benchmarks.md``,
"GPU"): at a 256-channel layer (32 x 8 problems, 134,400 per image of
800x1333) the forward takes 159x the 3x3 convolution. Holding all types of
a location in one program would read ``h1`` once instead of once per type
and make ``h1 T`` a ``32 x 32`` by ``32 x 256`` product, large enough for
``tl.dot``; that layout is the next step, to be timed on a GPU.
"""
import math
import os

import torch

try:
    import triton
    import triton.language as tl
except ImportError:  # the backend reports itself unavailable
    triton = None

    class tl:  # noqa: N801 - for the annotations and constants below

        @staticmethod
        def constexpr(value=None):
            return value


def available() -> bool:
    """Triton importable, and a CUDA device or the Triton interpreter."""
    if triton is None:
        return False
    return (torch.cuda.is_available()
            or os.environ.get('TRITON_INTERPRET') == '1')


def _jit(fn):
    return fn if triton is None else triton.jit(fn)


#: Padding value of the log-kernel: far below any real entry, finite.
NEG = tl.constexpr(-1e30)

#: The plan of a problem with a non-finite input.
NAN = tl.constexpr(float('nan'))
INF = tl.constexpr(float('inf'))

#: Terms of the series of :func:`_neg_expm1` (|x| < 1/2): the remainder is
#: below float64 resolution.
EXPM1_TERMS = tl.constexpr(17)

#: Partial-gradient entries per backward launch (chunks of locations).
BACKWARD_CHUNK_ENTRIES = 2**24


# ------------------------------------------------------------ device code
@_jit
def _div(x, y, FP32: tl.constexpr):
    """``x / y`` correctly rounded in both dtypes."""
    if FP32:
        return tl.div_rn(x, y)
    else:
        return x / y


@_jit
def _neg_expm1(x):
    """``-expm1(x)`` for ``x <= 0``: ``1 - exp(x)`` cancels for small
    ``|x|`` (the cross cost of nearly equal embeddings), so there a
    Taylor series in Horner form is used."""
    r = tl.zeros_like(x) + 1.0
    for j in tl.static_range(EXPM1_TERMS - 1):
        r = 1.0 + x * r * (1.0 / (EXPM1_TERMS - j))
    return tl.where(x > -0.5, -(x * r), 1.0 - tl.exp(x))


@_jit
def _power_of_two_scale(X, FP32: tl.constexpr):
    """The largest power of two not above ``max |X|``, 1 below 2
    (:func:`mmhgw.ot.power_of_two_scale`): the exponent bits of the
    maximum."""
    top = tl.max(tl.max(tl.abs(X), axis=1), axis=0)
    if FP32:
        bits = top.to(tl.int32, bitcast=True) & 0x7F800000
        scale = bits.to(tl.float32, bitcast=True)
    else:
        bits = top.to(tl.int64, bitcast=True) & 0x7FF0000000000000
        scale = bits.to(tl.float64, bitcast=True)
    return tl.where((top >= 2.0) & (top < INF), scale, 1.0)


@_jit
def _finite(x):
    """Whether every entry of ``x`` is finite (``x - x`` is NaN for NaN
    and infinite entries)."""
    return tl.sum(tl.where(x - x == 0.0, 0, 1)) == 0


@_jit
def _cross_cost(Xp, Xq, D: tl.constexpr, FP32: tl.constexpr):
    """``sq = |x_i - y_j|^2`` by the reference's expansion of the
    embeddings scaled by powers of two
    (:func:`mmhgw.ot.scaled_squared_distance`), ``E = exp(-max(sq, 0) /
    d)`` and ``K = 1 - E``."""
    a = _power_of_two_scale(Xp, FP32)
    b = _power_of_two_scale(Xq, FP32)
    c = tl.maximum(a, b)
    ra = _div(a, c, FP32)
    rb = _div(b, c, FP32)
    Xp = _div(Xp, Xp * 0.0 + a, FP32)
    Xq = _div(Xq, Xq * 0.0 + b, FP32)
    sqp = tl.sum(Xp * Xp, axis=1)
    sqq = tl.sum(Xq * Xq, axis=1)
    dot = tl.sum(Xp[:, None, :] * Xq[None, :, :], axis=2)
    sq = ((ra * ra) * sqp[:, None] +
          (rb * rb) * sqq[None, :]) - (2.0 * (ra * rb)) * dot
    sq = sq * c * c
    x = _div(-tl.maximum(sq, 0.0), tl.zeros_like(sq) + D, FP32)
    return sq, _neg_expm1(x), tl.exp(x)


@_jit
def _plan(h1, H2, row, col, K, beta, rmask, cmask, BP: tl.constexpr,
          BQ: tl.constexpr, OUTER: tl.constexpr, INNER: tl.constexpr,
          PROXIMAL: tl.constexpr, UNIFORM: tl.constexpr, EPS: tl.constexpr,
          P: tl.constexpr, Q: tl.constexpr, LOG_P: tl.constexpr,
          LOG_Q: tl.constexpr, LOG_T0: tl.constexpr, UNIF: tl.constexpr,
          TINY: tl.constexpr, LO: tl.constexpr, FP32: tl.constexpr):
    """The rounded plan [BP, BQ] (zero where padded) of one problem, the
    fixed-count path of :func:`mmhgw.ot.plan_from_terms`; also ``h1 T``.

    ``h1`` [BP, BP], ``H2`` [BQ, BQ] (``h2`` itself: ``h1 T h2^T`` reduces
    along its rows), ``row`` [BP], ``col`` [BQ], ``K`` [BP, BQ].
    """
    mask = rmask[:, None] & cmask[None, :]
    zero = tl.zeros_like(K)
    if UNIFORM:
        T = tl.where(mask, zero + UNIF, zero)
    else:
        LT = tl.where(mask, zero + LOG_T0, NEG)
        T = tl.where(mask, tl.exp(LT), zero)
        f = tl.sum(zero, axis=1)
        g = tl.sum(zero, axis=0)
        p_vec = f + P
        q_vec = g + Q
        eps = zero + EPS
        for _step in range(OUTER):
            # Eq. 25a: cost = row 1^T + 1 col^T - h1 T h2^T + beta K (the
            # paper's + eps is absorbed by the potentials).
            A = tl.sum(h1[:, :, None] * T[None, :, :], axis=1)
            C = tl.sum(A[:, None, :] * H2[None, :, :], axis=2)
            cost = (row[:, None] + col[None, :]) - C + beta * K
            LK = _div(-cost, eps, FP32)
            if PROXIMAL:
                LK = LK + LT  # KL(T || T_prev), Eq. 25
            LK = tl.where(mask, LK, NEG)
            # One log-domain Sinkhorn iteration, max-shifted, floored exp:
            # f = log p - LSE_j(logk + g), then g = log q - LSE_i(logk + f).
            x = tl.where(mask, LK + g[None, :], NEG)
            mx = tl.max(x, axis=1)
            e = tl.where(mask, tl.exp(tl.maximum(x - mx[:, None], LO)), zero)
            # Padded rows (columns) sum to 0: their log is kept finite.
            s = tl.where(rmask, tl.sum(e, axis=1), 1.0)
            f = tl.where(rmask, LOG_P - (tl.log(s) + mx), 0.0)
            x = tl.where(mask, LK + f[:, None], NEG)
            mx = tl.max(x, axis=0)
            e = tl.where(mask, tl.exp(tl.maximum(x - mx[None, :], LO)), zero)
            c = tl.where(cmask, tl.sum(e, axis=0), 1.0)
            g = tl.where(cmask, LOG_Q - (tl.log(c) + mx), 0.0)
            if INNER > 1:
                # Stabilised kernel-domain iterations on M = exp(logk+f+g).
                M = tl.where(
                    mask, tl.exp(tl.maximum(LK + f[:, None] + g[None, :], LO)),
                    zero)
                u = f * 0.0
                v = tl.where(cmask, g * 0.0 + 1.0, 0.0)
                for _it in range(INNER - 1):
                    s = tl.maximum(tl.sum(M * v[None, :], axis=1), TINY)
                    u = tl.where(rmask, _div(p_vec, s, FP32), 0.0)
                    c = tl.maximum(tl.sum(u[:, None] * M, axis=0), TINY)
                    v = tl.where(cmask, _div(q_vec, c, FP32), 0.0)
                f = tl.where(rmask, f + tl.log(tl.maximum(u, TINY)), 0.0)
                g = tl.where(cmask, g + tl.log(tl.maximum(v, TINY)), 0.0)
                T = M * u[:, None] * v[None, :]
                LT = tl.where(mask, LK + f[:, None] + g[None, :], NEG)
            else:
                LT = tl.where(mask, LK + f[:, None] + g[None, :], NEG)
                T = tl.where(mask, tl.exp(tl.maximum(LT, LO)), zero)
        # Rounding onto Gamma(p, q) (mmhgw.ot.round_to_polytope).
        rows = tl.maximum(tl.sum(T, axis=1), TINY)
        T = T * tl.minimum(_div(p_vec, rows, FP32), 1.0)[:, None]
        cols = tl.maximum(tl.sum(T, axis=0), TINY)
        T = T * tl.minimum(_div(q_vec, cols, FP32), 1.0)[None, :]
        dp = tl.where(rmask, tl.maximum(P - tl.sum(T, axis=1), 0.0), 0.0)
        dq = tl.where(cmask, tl.maximum(Q - tl.sum(T, axis=0), 0.0), 0.0)
        # The correction is skipped below sqrt(tiny), as in the reference
        # (total^2 > tiny: total >= 0).
        total = tl.sum(dp, axis=0)
        acts = total * total > TINY
        T = T + tl.where(
            acts,
            _div(dp[:, None] * dq[None, :], zero + tl.where(acts, total, 1.0),
                 FP32), 0.0)
    A = tl.sum(h1[:, :, None] * T[None, :, :], axis=1)
    return T, A


@_jit
def _forward_kernel(XP, XQ, H1, H2, ROW, COL, BETA, DIST, PARTS, N,
                    VP: tl.constexpr, VQ: tl.constexpr, D: tl.constexpr,
                    BP: tl.constexpr, BQ: tl.constexpr, BD: tl.constexpr,
                    OUTER: tl.constexpr, INNER: tl.constexpr,
                    PROXIMAL: tl.constexpr, UNIFORM: tl.constexpr,
                    EPS: tl.constexpr, P: tl.constexpr, Q: tl.constexpr,
                    LOG_P: tl.constexpr, LOG_Q: tl.constexpr,
                    LOG_T0: tl.constexpr, UNIF: tl.constexpr,
                    TINY: tl.constexpr, LO: tl.constexpr, FP32: tl.constexpr):
    pid = tl.program_id(0).to(tl.int64)
    m = pid // N
    n = pid % N
    ip = tl.arange(0, BP)
    iq = tl.arange(0, BQ)
    ie = tl.arange(0, BD)
    rmask = ip < VP
    cmask = iq < VQ
    emask = ie < D
    Xp = tl.load(XP + m * VP * D + ip[:, None] * D + ie[None, :],
                 mask=rmask[:, None] & emask[None, :], other=0.0)
    Xq = tl.load(XQ + n * VQ * D + iq[:, None] * D + ie[None, :],
                 mask=cmask[:, None] & emask[None, :], other=0.0)
    h1 = tl.load(H1 + m * VP * VP + ip[:, None] * VP + ip[None, :],
                 mask=rmask[:, None] & rmask[None, :], other=0.0)
    h2 = tl.load(H2 + n * VQ * VQ + iq[:, None] * VQ + iq[None, :],
                 mask=cmask[:, None] & cmask[None, :], other=0.0)
    row = tl.load(ROW + m * VP + ip, mask=rmask, other=0.0)
    col = tl.load(COL + n * VQ + iq, mask=cmask, other=0.0)
    beta = tl.load(BETA)
    # A problem with a non-finite input gets a NaN plan (the reference's
    # poisoned_problems); padded entries were loaded as 0.
    good = (_finite(Xp) & _finite(h1) & _finite(row) & _finite(Xq)
            & _finite(h2) & _finite(col) & (beta - beta == 0.0))
    sq, K, E = _cross_cost(Xp, Xq, D, FP32)
    T, A = _plan(h1, h2, row, col, K, beta, rmask, cmask, BP, BQ, OUTER, INNER,
                 PROXIMAL, UNIFORM, EPS, P, Q, LOG_P, LOG_Q, LOG_T0, UNIF,
                 TINY, LO, FP32)
    T = tl.where(good, T, NAN)
    # Value at the plan: <row 1^T + 1 col^T - h1 T h2^T + beta K, T>.
    C = tl.sum(A[:, None, :] * h2[None, :, :], axis=2)
    value = tl.sum(
        tl.sum(((row[:, None] + col[None, :]) - C + beta * K) * T, axis=1),
        axis=0)
    tl.store(DIST + pid, value)
    # Parts: V_q T^T X_p (columns of the plan sum to 1 / V_q).
    parts = VQ * tl.sum(T[:, :, None] * Xp[:, None, :], axis=0)
    tl.store(PARTS + pid * VQ * D + iq[:, None] * D + ie[None, :], parts,
             mask=cmask[:, None] & emask[None, :])


@_jit
def _backward_kernel(GD, GP, XP, XQ, H1, H2, ROW, COL, BETA, DXP, DH1, DROW,
                     DXQ, DH2, DCOL, DBETA, PARTS, M0, N,
                     WANT_PARTS: tl.constexpr, VP: tl.constexpr,
                     VQ: tl.constexpr, D: tl.constexpr, BP: tl.constexpr,
                     BQ: tl.constexpr, BD: tl.constexpr, OUTER: tl.constexpr,
                     INNER: tl.constexpr, PROXIMAL: tl.constexpr,
                     UNIFORM: tl.constexpr, EPS: tl.constexpr, P: tl.constexpr,
                     Q: tl.constexpr, LOG_P: tl.constexpr, LOG_Q: tl.constexpr,
                     LOG_T0: tl.constexpr, UNIF: tl.constexpr,
                     TINY: tl.constexpr, LO: tl.constexpr, FP32: tl.constexpr):
    """Envelope gradient of location ``M0 + pid`` over all types.

    At the fixed plan T: d/drow = gd T 1, d/dcol = gd T^T 1,
    d/dbeta = gd <K, T>, d/dh1 = -gd T h2 T^T, d/dh2 = -gd T^T h1 T,
    d/dK = gd beta T chained through K = 1 - exp(-max(sq, 0) / d)
    (dK/dsq = exp(-sq / d) / d where sq >= 0), and the parts
    V_q T^T X_p give dX_p += V_q T gp. With ``WANT_PARTS`` the parts at
    the plans are written to ``PARTS`` as the forward does.
    """
    pid = tl.program_id(0).to(tl.int64)
    m = M0 + pid
    ip = tl.arange(0, BP)
    iq = tl.arange(0, BQ)
    ie = tl.arange(0, BD)
    rmask = ip < VP
    cmask = iq < VQ
    emask = ie < D
    pe_mask = rmask[:, None] & emask[None, :]
    pp_mask = rmask[:, None] & rmask[None, :]
    qe_mask = cmask[:, None] & emask[None, :]
    qq_mask = cmask[:, None] & cmask[None, :]
    Xp = tl.load(XP + m * VP * D + ip[:, None] * D + ie[None, :], mask=pe_mask,
                 other=0.0)
    h1 = tl.load(H1 + m * VP * VP + ip[:, None] * VP + ip[None, :],
                 mask=pp_mask, other=0.0)
    row = tl.load(ROW + m * VP + ip, mask=rmask, other=0.0)
    beta = tl.load(BETA)
    good_location = (_finite(Xp) & _finite(h1) & _finite(row) &
                     (beta - beta == 0.0))
    dXp = Xp * 0.0
    dh1 = h1 * 0.0
    drow = row * 0.0
    for n in range(N):
        Xq = tl.load(XQ + n * VQ * D + iq[:, None] * D + ie[None, :],
                     mask=qe_mask, other=0.0)
        h2 = tl.load(H2 + n * VQ * VQ + iq[:, None] * VQ + iq[None, :],
                     mask=qq_mask, other=0.0)
        col = tl.load(COL + n * VQ + iq, mask=cmask, other=0.0)
        sq, K, E = _cross_cost(Xp, Xq, D, FP32)
        T, A = _plan(h1, h2, row, col, K, beta, rmask, cmask, BP, BQ, OUTER,
                     INNER, PROXIMAL, UNIFORM, EPS, P, Q, LOG_P, LOG_Q, LOG_T0,
                     UNIF, TINY, LO, FP32)
        # A NaN plan for a problem with a non-finite input: every gradient
        # term below holds T, except dX_q's, whose clamp mask could hide
        # it; that one is set to NaN explicitly.
        good = good_location & _finite(Xq) & _finite(h2) & _finite(col)
        T = tl.where(good, T, NAN)
        if WANT_PARTS:
            tl.store(
                PARTS + (m * N + n) * VQ * D + iq[:, None] * D + ie[None, :],
                VQ * tl.sum(T[:, :, None] * Xp[:, None, :], axis=0),
                mask=qe_mask)
        gd = tl.load(GD + m * N + n)
        gp = tl.load(GP + (m * N + n) * VQ * D + iq[:, None] * D + ie[None, :],
                     mask=qe_mask, other=0.0)
        dXp += VQ * tl.sum(T[:, :, None] * gp[None, :, :], axis=1)
        drow += gd * tl.sum(T, axis=1)
        # T h2 [BP, BQ], then dh1[i, k] -= gd (T h2)[i] . T[k].
        B = tl.sum(T[:, :, None] * h2[None, :, :], axis=1)
        dh1 -= gd * tl.sum(B[:, None, :] * T[None, :, :], axis=2)
        # Cross cost: dsq/dx_i = 2 (x_i - y_j) = -dsq/dy_j.
        gsq = tl.where(sq >= 0,
                       _div(gd * beta * T * E,
                            tl.zeros_like(T) + D, FP32), 0.0)
        gx = 2.0 * gsq[:, :, None] * (Xp[:, None, :] - Xq[None, :, :])
        dXp += tl.sum(gx, axis=1)
        # Per-type gradients: partials of this (location, type).
        k = pid * N + n
        tl.store(DXQ + k * VQ * D + iq[:, None] * D + ie[None, :],
                 tl.where(good, -tl.sum(gx, axis=0), NAN), mask=qe_mask)
        dh2 = -gd * tl.sum(T[:, :, None] * A[:, None, :], axis=0)
        tl.store(DH2 + k * VQ * VQ + iq[:, None] * VQ + iq[None, :], dh2,
                 mask=qq_mask)
        tl.store(DCOL + k * VQ + iq, gd * tl.sum(T, axis=0), mask=cmask)
        tl.store(DBETA + k, gd * tl.sum(tl.sum(K * T, axis=1), axis=0))
    tl.store(DXP + m * VP * D + ip[:, None] * D + ie[None, :], dXp,
             mask=pe_mask)
    tl.store(DH1 + m * VP * VP + ip[:, None] * VP + ip[None, :], dh1,
             mask=pp_mask)
    tl.store(DROW + m * VP + ip, drow, mask=rmask)


# -------------------------------------------------------------- host code
def _meta(X_p, X_q, eps, outer, inner, proximal, uniform):
    """Compile-time arguments: sizes, options, and the constants of the
    reference in the inputs' dtype (Python floats holding the dtype's
    values, so the kernel materialises exactly those)."""
    dtype = X_p.dtype
    if dtype not in (torch.float32, torch.float64):
        raise TypeError(f'the Triton kernels run float32 or float64, got '
                        f'{dtype}')
    _, V_p, d = X_p.shape
    V_q = X_q.shape[1]
    tiny = torch.finfo(dtype).tiny
    # mmhgw.ot.safe_log of the uniform marginals, as the reference rounds.
    p = torch.tensor(1.0 / V_p, dtype=dtype)
    q = torch.tensor(1.0 / V_q, dtype=dtype)
    log_p, log_q = torch.log(p), torch.log(q)
    return dict(VP=V_p, VQ=V_q, D=d, BP=triton.next_power_of_2(V_p),
                BQ=triton.next_power_of_2(V_q), BD=triton.next_power_of_2(d),
                OUTER=int(outer), INNER=int(inner), PROXIMAL=bool(proximal),
                UNIFORM=bool(uniform), EPS=float(torch.tensor(
                    eps,
                    dtype=dtype)), P=float(p), Q=float(q), LOG_P=float(log_p),
                LOG_Q=float(log_q), LOG_T0=float(log_p + log_q),
                UNIF=float(torch.tensor(1.0 / (V_p * V_q),
                                        dtype=dtype)), TINY=tiny,
                LO=0.5 * math.log(tiny), FP32=dtype == torch.float32)


def _num_warps(meta, itemsize, backward):
    """Warps per program from the bytes of the largest broadcast
    temporary (``BP x BP x BQ``, the product ``h1 T``), the backward, with
    more live blocks, switching at half the size; the thresholds keep the
    layer's float32 problems free of register spills on sm_90
    (:func:`compile_report`; ``bench/triton_resources.py`` writes the
    table)."""
    size = meta['BP'] * max(meta['BP'], meta['BD']) * meta['BQ'] * itemsize
    return 4 if size < (2**14 if backward else 2**15) else 8


def forward(X_p, X_q, h1, h2, row, col, beta, eps, outer, inner, proximal,
            uniform):
    """``(dist [M, N], parts [M, N, V_q, d])`` of the op (inputs
    contiguous, one dtype, one device; ``beta`` a 0-dim tensor)."""
    M = X_p.shape[0]
    N, V_q, d = X_q.shape
    dist = X_p.new_empty(M, N)
    parts = X_p.new_empty(M, N, V_q, d)
    if M * N == 0:
        return dist, parts
    meta = _meta(X_p, X_q, eps, outer, inner, proximal, uniform)
    _forward_kernel[(M * N, )](X_p, X_q, h1, h2, row, col, beta, dist, parts,
                               N, num_warps=_num_warps(meta,
                                                       X_p.element_size(),
                                                       False), **meta)
    return dist, parts


def backward(grad_dist, grad_parts, X_p, X_q, h1, h2, row, col, beta, eps,
             outer, inner, proximal, uniform, want_parts=False):
    """The envelope gradient ``(dX_p, dX_q, dh1, dh2, drow, dcol, dbeta)``
    for upstream gradients ``grad_dist`` [M, N] and ``grad_parts``
    [M, N, V_q, d] (contiguous), and the parts [M, N, V_q, d] at the plans
    solved again (None unless ``want_parts``)."""
    M, V_p, d = X_p.shape
    N, V_q, _ = X_q.shape
    dX_p, dh1, drow = (torch.empty_like(t) for t in (X_p, h1, row))
    dX_q, dh2, dcol = (torch.zeros_like(t) for t in (X_q, h2, col))
    dbeta = torch.zeros_like(beta)
    parts = X_p.new_empty(M, N, V_q, d) if want_parts else None
    if M * N == 0:
        grads = (dX_p.zero_(), dX_q, dh1.zero_(), dh2, drow.zero_(), dcol,
                 dbeta)
        return grads, parts
    meta = _meta(X_p, X_q, eps, outer, inner, proximal, uniform)
    per_pair = V_q * (d + V_q + 1) + 1
    num_warps = _num_warps(meta, X_p.element_size(), True)
    chunk = max(1, min(M, BACKWARD_CHUNK_ENTRIES // (N * per_pair)))
    part_xq = X_p.new_empty(chunk, N, V_q, d)
    part_h2 = X_p.new_empty(chunk, N, V_q, V_q)
    part_col = X_p.new_empty(chunk, N, V_q)
    part_beta = X_p.new_empty(chunk, N)
    for start in range(0, M, chunk):
        length = min(chunk, M - start)
        _backward_kernel[(length, )](grad_dist, grad_parts, X_p, X_q, h1, h2,
                                     row, col, beta, dX_p, dh1, drow, part_xq,
                                     part_h2, part_col, part_beta,
                                     dX_p if parts is None else parts, start,
                                     N, bool(want_parts), num_warps=num_warps,
                                     **meta)
        dX_q += part_xq[:length].sum(0)
        dh2 += part_h2[:length].sum(0)
        dcol += part_col[:length].sum(0)
        dbeta += part_beta[:length].sum()
    return (dX_p, dX_q, dh1, dh2, drow, dcol, dbeta), parts


def compile_report(arch: int = 90, dtype: torch.dtype = torch.float32,
                   V_p: int = 32, V_q: int = 8, d: int = 8,
                   options: dict = None) -> dict:
    """Compile the forward and backward kernels for an NVIDIA GPU of compute
    capability ``arch`` at one problem shape, with no GPU: Triton's compiler
    down to PTX, then its bundled ``ptxas -v`` for the resource use.

    ``options``: ``eps``, ``outer``, ``inner``, ``proximal``, ``uniform``
    (default: the layer's solver). Returns, per kernel (``'forward'``,
    ``'backward'``): ``num_warps``, ``registers`` per thread,
    ``spill_bytes`` (stores + loads) and ``tensor_cores`` (the PTX holds
    ``mma`` / ``wgmma`` instructions).
    """
    import re
    import subprocess
    import tempfile

    from triton.backends.compiler import GPUTarget
    from triton.backends.nvidia.compiler import get_ptxas
    from triton.compiler import ASTSource

    if os.environ.get('TRITON_INTERPRET') == '1':
        raise RuntimeError('compile_report compiles the kernels, which '
                           'TRITON_INTERPRET=1 replaced by the interpreter '
                           'when this module was imported; unset it')
    solver = dict(eps=1e-2, outer=3, inner=10, proximal=True, uniform=False)
    solver.update(options or {})
    X_p = torch.zeros(1, V_p, d, dtype=dtype)
    X_q = torch.zeros(1, V_q, d, dtype=dtype)
    meta = _meta(X_p, X_q, **solver)
    pointer = {torch.float32: '*fp32', torch.float64: '*fp64'}[dtype]
    try:  # the bundled ptxas by target (Triton >= 3.7) or the only one
        ptxas = get_ptxas(arch).path
    except TypeError:
        ptxas = get_ptxas().path
    report = {}
    for name, kernel, backward in (('forward', _forward_kernel, False),
                                   ('backward', _backward_kernel, True)):
        constants = dict(meta)
        if 'WANT_PARTS' in kernel.arg_names:
            constants['WANT_PARTS'] = False
        # Compile-time constants, the two integer arguments, else pointers.
        signature = {a: pointer for a in kernel.arg_names}
        signature.update({a: 'i32' for a in ('N', 'M0') if a in signature})
        signature.update({a: 'constexpr' for a in constants})
        num_warps = _num_warps(meta, X_p.element_size(), backward)
        compiled = triton.compile(
            ASTSource(fn=kernel, signature=signature, constexprs=constants),
            target=GPUTarget('cuda', arch,
                             32), options=dict(num_warps=num_warps))
        ptx = compiled.asm['ptx']
        suffix = 'a' if arch >= 90 else ''
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, f'{name}.ptx')
            with open(path, 'w') as f:
                f.write(ptx)
            log = subprocess.run([
                ptxas, f'-arch=sm_{arch}{suffix}', '-v', path, '-o',
                os.path.join(tmp, f'{name}.cubin')
            ], capture_output=True, text=True, check=True).stderr
        registers = re.search(r'Used (\d+) registers', log)
        spills = re.findall(r'(\d+) bytes spill (?:stores|loads)', log)
        report[name] = dict(
            num_warps=num_warps,
            registers=int(registers.group(1)) if registers else None,
            spill_bytes=sum(map(int, spills)),
            tensor_cores=re.search(r'\b(wg)?mma\.', ptx) is not None)
    return report
