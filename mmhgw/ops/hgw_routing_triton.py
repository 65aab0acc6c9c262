"""Triton kernels of the HGW routing op (:mod:`mmhgw.ops.hgw_routing`).

The specification is :func:`mmhgw.ops.hgw_routing_reference`: the same
iterates, floors and rounding as ``mmhgw/ops/csrc/hgw_routing_kernel.h``.

Layout: tiles of output types. One program holds one location and
``BN`` output types: ``h1`` is read once, and the ``BN`` plans of the tile
sit side by side as one ``[BP, BN * BQ]`` block (column ``(n, j)``: part
``j`` of type ``n``), so that the GW products ``h1 T_n h2_n^T`` of all of
them are two ``tl.dot``: ``h1`` times the block, then the block-diagonal
matrix of the ``h2_n^T``; the cross cost's inner products, the parts
``V_q T^T X_p`` and every product of the backward are ``tl.dot`` too.
Row reductions (the Sinkhorn row sums) run per type, over segments of
``BQ`` columns; column reductions over the whole block. Blocks are padded
to powers of two of at least 16 (``tl.dot``'s smallest) with masks: padded
entries of the log-kernel are ``NEG`` (finite: ``-inf - (-inf)`` would be
NaN in the max-shifted sums), of every ``exp`` and of the plan 0, so they
add nothing to a sum or a product.

- forward: one program per (location, tile of types): the cross cost, the
  proximal-point solve (Eq. 25 / 25a), the values (Eq. 21) and the parts.
- backward: one program per location, looping over its tiles: the plans
  are solved again and the envelope gradient taken at them. The
  per-location gradients (``dX_p``, ``dh1``, ``drow``) accumulate in
  registers and are written once; the per-type ones (``dX_q``, ``dh2``,
  ``dcol``, ``dbeta``) are written per (location, type) into partial
  buffers that torch sums over the locations: deterministic, no atomics,
  and bounded by running the locations in chunks.

Products: float32 by three TF32 tensor-core products (``tf32x3``, about
float32's accuracy) unless :data:`FORWARD_PRODUCTS` / ``BACKWARD_PRODUCTS``
say otherwise, float64 exactly (``ieee``). :func:`compile_report`
(``bench/triton_resources.py``) shows the registers, spills and
tensor-core instructions of the kernels as compiled for a GPU.

Numerics: dtype-dependent constants (``eps``, marginals and their logs, the
floors of :func:`mmhgw.ot.safe_log` and :func:`mmhgw.ot.exp_floor`) enter as
compile-time constants, materialised in the kernel's dtype exactly as torch
rounds the reference's Python scalars; ``beta`` is read from its tensor
(no host synchronisation). float32 divisions use ``tl.div_rn``: Triton's
default float32 division on NVIDIA GPUs is approximate.

A problem with a non-finite input gets a NaN plan, as in the reference;
its inputs are zeroed for the solve, since a tile's products mix the
columns of all its types and ``0 * NaN`` is NaN.
"""
import math
import os
import warnings

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

#: The plan of a problem with a non-finite input is NaN, made in the
#: kernels as ``INF - INF``: a NaN global would never compare equal to
#: itself, and Triton (3.6) then refuses the kernel as changed since its
#: compilation.
INF = tl.constexpr(float('inf'))

#: The smallest column sum of ``exp(LK + f + g_old)``, relative to ``p``,
#: from which a proximal step's column update is formed without an exp
#: (the C++ kernel's ``kSafeColumn``): the floored entries then weigh at
#: most ``exp(LO) / SAFE_COLUMN`` (~1e-13) of ``q``.
SAFE_COLUMN = tl.constexpr(2.0**-20)

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
    (:func:`mmhgw.ot.power_of_two_scale`)."""
    return _power_of_two_below(tl.max(tl.max(tl.abs(X), axis=1), axis=0), FP32)


@_jit
def _power_of_two_below(top, FP32: tl.constexpr):
    """Elementwise: the largest power of two not above ``top`` (>= 0), or
    1 where ``top`` is below 2 or not finite: the exponent bits of
    ``top``."""
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


# Reductions and broadcasts of a tile's [BP, BN * BQ] blocks by type.
@_jit
def _segment_sum(x, BP: tl.constexpr, BN: tl.constexpr, BQ: tl.constexpr):
    """[BP, BN * BQ] -> [BP, BN]: sums over each type's columns."""
    return tl.sum(tl.reshape(x, (BP, BN, BQ)), axis=2)


@_jit
def _segment_max(x, BP: tl.constexpr, BN: tl.constexpr, BQ: tl.constexpr):
    """[BP, BN * BQ] -> [BP, BN]: maxima over each type's columns."""
    return tl.max(tl.reshape(x, (BP, BN, BQ)), axis=2)


@_jit
def _expand(v, BP: tl.constexpr, BN: tl.constexpr, BQ: tl.constexpr):
    """[BP, BN] -> [BP, BN * BQ]: each type's value on all its columns."""
    return tl.reshape(tl.broadcast_to(v[:, :, None], (BP, BN, BQ)),
                      (BP, BN * BQ))


@_jit
def _type_max(v, BN: tl.constexpr, BQ: tl.constexpr):
    """[BN * BQ] -> [BN * BQ]: the maximum over each type's columns, on
    each of them."""
    top = tl.max(tl.reshape(v, (BN, BQ)), axis=1)
    return tl.reshape(tl.broadcast_to(top[:, None], (BN, BQ)), (BN * BQ, ))


@_jit
def _type_sum(v, BN: tl.constexpr, BQ: tl.constexpr):
    """[BN * BQ] -> [BN]: sums over each type's columns."""
    return tl.sum(tl.reshape(v, (BN, BQ)), axis=1)


@_jit
def _cross_cost_tile(Xp, Xq, BN: tl.constexpr, BQ: tl.constexpr,
                     D: tl.constexpr, FP32: tl.constexpr,
                     PRECISION: tl.constexpr):
    """The cross cost of one location's ``Xp`` [BP, BD] and the parts
    ``Xq`` [BN * BQ, BD] of a tile of types: ``sq = |x_i - y_j|^2`` by the
    reference's expansion of the embeddings scaled by powers of two, one
    for ``Xp`` and one per type (:func:`mmhgw.ot.scaled_squared_distance`),
    the inner products as one tl.dot; ``E = exp(-max(sq, 0) / d)`` and
    ``K = 1 - E``. Returns ``(sq, K, E)`` [BP, BN * BQ]."""
    a = _power_of_two_scale(Xp, FP32)
    b = _power_of_two_below(_type_max(tl.max(tl.abs(Xq), axis=1), BN, BQ),
                            FP32)
    c = tl.maximum(b * 0.0 + a, b)
    ra = _div(b * 0.0 + a, c, FP32)
    rb = _div(b, c, FP32)
    Xp = _div(Xp, Xp * 0.0 + a, FP32)
    Xq = _div(Xq, Xq * 0.0 + b[:, None], FP32)
    sqp = tl.sum(Xp * Xp, axis=1)
    sqq = tl.sum(Xq * Xq, axis=1)
    dot = tl.dot(Xp, tl.trans(Xq), input_precision=PRECISION)
    sq = (((ra * ra)[None, :] * sqp[:, None] + (rb * rb * sqq)[None, :]) -
          (2.0 * (ra * rb))[None, :] * dot)
    sq = sq * (c * c)[None, :]
    x = _div(-tl.maximum(sq, 0.0), tl.zeros_like(sq) + D, FP32)
    return sq, _neg_expm1(x), tl.exp(x)


@_jit
def _plan_tile(h1, H2T, row, col, K, beta, rmask, wmask, tmask,
               BP: tl.constexpr, BN: tl.constexpr, BQ: tl.constexpr,
               OUTER: tl.constexpr, INNER: tl.constexpr,
               PROXIMAL: tl.constexpr, UNIFORM: tl.constexpr,
               EPS: tl.constexpr, P: tl.constexpr, Q: tl.constexpr,
               LOG_P: tl.constexpr, LOG_Q: tl.constexpr, LOG_T0: tl.constexpr,
               UNIF: tl.constexpr, TINY: tl.constexpr, LO: tl.constexpr,
               FP32: tl.constexpr, PRECISION: tl.constexpr):
    """The rounded plans [BP, BN * BQ] of a tile of types (zero where
    padded), the fixed-count path of :func:`mmhgw.ot.plan_from_terms`, and
    ``h1 T``. ``H2T`` [BN * BQ, BN * BQ] is
    block diagonal with the blocks ``h2_n^T``; ``rmask`` [BP] marks the
    real rows, ``wmask`` [BN * BQ] the real columns, ``tmask`` [BN] the
    real types."""
    mask = rmask[:, None] & wmask[None, :]
    rows_mask = rmask[:, None] & tmask[None, :]  # [BP, BN]
    zero = tl.zeros_like(K)
    if UNIFORM:
        T = tl.where(mask, zero + UNIF, zero)
    else:
        LT = tl.where(mask, zero + LOG_T0, NEG)
        T = tl.where(mask, tl.exp(LT), zero)
        f = _segment_sum(zero, BP, BN, BQ)  # [BP, BN]
        g = tl.sum(zero, axis=0)  # [BN * BQ]
        eps = zero + EPS
        for _step in range(OUTER):
            # Eq. 25a for every type of the tile at once.
            A = tl.dot(h1, T, input_precision=PRECISION)
            C = tl.dot(A, H2T, input_precision=PRECISION)
            cost = (row[:, None] + col[None, :]) - C + beta * K
            LK = _div(-cost, eps, FP32)
            if PROXIMAL:
                LK = LK + LT
            LK = tl.where(mask, LK, NEG)
            x = tl.where(mask, LK + g[None, :], NEG)
            mx = _segment_max(x, BP, BN, BQ)
            e = tl.where(mask,
                         tl.exp(tl.maximum(x - _expand(mx, BP, BN, BQ), LO)),
                         zero)
            s = tl.where(rows_mask, _segment_sum(e, BP, BN, BQ), 1.0)
            f = tl.where(rows_mask, LOG_P - (tl.log(s) + mx), 0.0)
            # e p / s is exp(LK + f + g) with the old g: the column update
            # and M = exp(LK + f + g_new) follow without another exp,
            # unless a column is small enough for the floors to matter
            # (see SAFE_COLUMN); then the tile takes it in the log domain.
            M = e * _expand(_div(s * 0.0 + P, s, FP32), BP, BN, BQ)
            c = tl.sum(M, axis=0)
            if tl.min(tl.where(wmask, c, 1.0)) >= P * SAFE_COLUMN:
                w = tl.where(wmask, _div(c * 0.0 + Q, c, FP32), 0.0)
                g = tl.where(wmask, g + tl.log(tl.maximum(w, TINY)), 0.0)
                M = M * w[None, :]
            else:
                xc = tl.where(mask, LK + _expand(f, BP, BN, BQ), NEG)
                mc = tl.max(xc, axis=0)
                ec = tl.where(mask, tl.exp(tl.maximum(xc - mc[None, :], LO)),
                              zero)
                c = tl.where(wmask, tl.sum(ec, axis=0), 1.0)
                g = tl.where(wmask, LOG_Q - (tl.log(c) + mc), 0.0)
                M = tl.where(
                    mask,
                    tl.exp(
                        tl.maximum(LK + _expand(f, BP, BN, BQ) + g[None, :],
                                   LO)), zero)
            if INNER > 1:
                u = f * 0.0
                v = tl.where(wmask, g * 0.0 + 1.0, 0.0)
                for _it in range(INNER - 1):
                    s = tl.maximum(_segment_sum(M * v[None, :], BP, BN, BQ),
                                   TINY)
                    u = tl.where(rows_mask, _div(s * 0.0 + P, s, FP32), 0.0)
                    c = tl.maximum(tl.sum(_expand(u, BP, BN, BQ) * M, axis=0),
                                   TINY)
                    v = tl.where(wmask, _div(c * 0.0 + Q, c, FP32), 0.0)
                f = tl.where(rows_mask, f + tl.log(tl.maximum(u, TINY)), 0.0)
                g = tl.where(wmask, g + tl.log(tl.maximum(v, TINY)), 0.0)
                T = M * _expand(u, BP, BN, BQ) * v[None, :]
            else:
                T = M
            LT = tl.where(mask, LK + _expand(f, BP, BN, BQ) + g[None, :], NEG)
        # Rounding onto Gamma(p, q), per type.
        rows = tl.maximum(_segment_sum(T, BP, BN, BQ), TINY)
        T = T * _expand(tl.minimum(_div(rows * 0.0 + P, rows, FP32), 1.0), BP,
                        BN, BQ)
        cols = tl.maximum(tl.sum(T, axis=0), TINY)
        T = T * tl.minimum(_div(cols * 0.0 + Q, cols, FP32), 1.0)[None, :]
        dp = tl.where(rows_mask,
                      tl.maximum(P - _segment_sum(T, BP, BN, BQ), 0.0), 0.0)
        dq = tl.where(wmask, tl.maximum(Q - tl.sum(T, axis=0), 0.0), 0.0)
        total = tl.reshape(
            tl.broadcast_to(tl.sum(dp, axis=0)[:, None], (BN, BQ)),
            (BN * BQ, ))
        acts = total * total > TINY
        T = T + tl.where(
            acts[None, :],
            _div(
                _expand(dp, BP, BN, BQ) * dq[None, :],
                zero + tl.where(acts, total, 1.0)[None, :], FP32), 0.0)
    A = tl.dot(h1, T, input_precision=PRECISION)
    return T, A


@_jit
def _rows_finite(x):
    """[R, C] -> [R]: whether each row of ``x`` is finite."""
    return tl.sum(tl.where(x - x == 0.0, 0, 1), axis=1) == 0


@_jit
def _load_location(XP, H1, ROW, BETA, m, ip, ie, rmask, emask,
                   VP: tl.constexpr, D: tl.constexpr):
    """Location ``m``'s ``Xp`` [BP, BD], ``h1`` [BP, BP], ``row`` [BP] and
    ``beta``, and whether they are all finite; when not, zeroed.

    Problems with a non-finite input get NaN plans (the reference's
    poisoned_problems). Their inputs are zeroed for the solve: a tile's
    products mix the columns of all its types, and 0 * NaN is NaN."""
    Xp = tl.load(XP + m * VP * D + ip[:, None] * D + ie[None, :],
                 mask=rmask[:, None] & emask[None, :], other=0.0)
    h1 = tl.load(H1 + m * VP * VP + ip[:, None] * VP + ip[None, :],
                 mask=rmask[:, None] & rmask[None, :], other=0.0)
    row = tl.load(ROW + m * VP + ip, mask=rmask, other=0.0)
    beta = tl.load(BETA)
    good = (_finite(Xp) & _finite(h1) & _finite(row) & (beta - beta == 0.0))
    return (tl.where(good, Xp, 0.0), tl.where(good, h1, 0.0),
            tl.where(good, row, 0.0), tl.where(good, beta, 0.0), good)


@_jit
def _load_types(XQ, H2, COL, n0, wn, wj, ie, wmask, emask, good_location,
                BN: tl.constexpr, BQ: tl.constexpr, VQ: tl.constexpr,
                D: tl.constexpr):
    """A tile's subcapsules ``Xq`` [BN * BQ, BD], ``col`` [BN * BQ] and the
    block-diagonal ``H2T`` [BN * BQ, BN * BQ] with
    ``H2T[(n, k), (n, j)] = h2[n, j, k]`` (0 between different types), and
    ``good`` [BN * BQ]: the columns of problems whose inputs are all finite
    (with ``good_location``, the location's). The inputs of the other
    types are zeroed, as in :func:`_load_location`."""
    Xq = tl.load(
        XQ + (n0 + wn)[:, None] * VQ * D + wj[:, None] * D + ie[None, :],
        mask=wmask[:, None] & emask[None, :], other=0.0)
    col = tl.load(COL + (n0 + wn) * VQ + wj, mask=wmask, other=0.0)
    H2T = tl.load(
        H2 + (n0 + wn)[None, :] * VQ * VQ + wj[None, :] * VQ + wj[:, None],
        mask=(wn[:, None] == wn[None, :]) & wmask[:, None] & wmask[None, :],
        other=0.0)
    column_good = (_rows_finite(Xq) & _rows_finite(tl.trans(H2T)) &
                   (col - col == 0.0))
    good = ((_type_max(tl.where(column_good, 0, 1), BN, BQ) == 0)
            & good_location)
    # H2T is block-diagonal by type and good is per type, so masking its
    # rows zeroes the same entries as masking its columns; one broadcast
    # of good for both (Triton 3.7.1's layout pass miscompiles the second
    # orientation in the float64 backward).
    rows_good = good[:, None]
    Xq = tl.where(rows_good, Xq, 0.0)
    H2T = tl.where(rows_good, H2T, 0.0)
    return Xq, tl.where(good, col, 0.0), H2T, good


@_jit
def _store_parts(PARTS, T, Xp, first, wn, wj, ie, wmask, emask,
                 VQ: tl.constexpr, D: tl.constexpr, PRECISION: tl.constexpr):
    """Parts ``V_q T^T X_p`` of a tile's types, problem ``first`` on."""
    tl.store(
        PARTS + (first + wn)[:, None] * VQ * D + wj[:, None] * D + ie[None, :],
        VQ * tl.dot(tl.trans(T), Xp, input_precision=PRECISION),
        mask=wmask[:, None] & emask[None, :])


@_jit
def _forward_tile_kernel(
        XP, XQ, H1, H2, ROW, COL, BETA, DIST, PARTS, N,
        WANT_PARTS: tl.constexpr, VP: tl.constexpr, VQ: tl.constexpr,
        D: tl.constexpr, BP: tl.constexpr, BQ: tl.constexpr, BD: tl.constexpr,
        BN: tl.constexpr, OUTER: tl.constexpr, INNER: tl.constexpr,
        PROXIMAL: tl.constexpr, UNIFORM: tl.constexpr, EPS: tl.constexpr,
        P: tl.constexpr, Q: tl.constexpr, LOG_P: tl.constexpr,
        LOG_Q: tl.constexpr, LOG_T0: tl.constexpr, UNIF: tl.constexpr,
        TINY: tl.constexpr, LO: tl.constexpr, FP32: tl.constexpr,
        PRECISION: tl.constexpr):
    """The forward of location ``program_id(0)`` for the types
    ``BN * program_id(1) + [0, BN)``: distances, and with ``WANT_PARTS``
    parts."""
    m = tl.program_id(0).to(tl.int64)
    n0 = tl.program_id(1).to(tl.int64) * BN
    ip = tl.arange(0, BP)
    ie = tl.arange(0, BD)
    it = tl.arange(0, BN)
    iw = tl.arange(0, BN * BQ)
    wn = iw // BQ  # type of a column within the tile
    wj = iw % BQ  # part of a column
    rmask = ip < VP
    emask = ie < D
    tmask = n0 + it < N
    wmask = (n0 + wn < N) & (wj < VQ)
    Xp, h1, row, beta, good_location = _load_location(XP, H1, ROW, BETA, m, ip,
                                                      ie, rmask, emask, VP, D)
    Xq, col, H2T, good = _load_types(XQ, H2, COL, n0, wn, wj, ie, wmask, emask,
                                     good_location, BN, BQ, VQ, D)
    sq, K, E = _cross_cost_tile(Xp, Xq, BN, BQ, D, FP32, PRECISION)
    T, A = _plan_tile(h1, H2T, row, col, K, beta, rmask, wmask, tmask, BP, BN,
                      BQ, OUTER, INNER, PROXIMAL, UNIFORM, EPS, P, Q, LOG_P,
                      LOG_Q, LOG_T0, UNIF, TINY, LO, FP32, PRECISION)
    T = tl.where(good[None, :], T, INF - INF)
    # Values at the plans: <row 1^T + 1 col^T - h1 T h2^T + beta K, T>.
    C = tl.dot(A, H2T, input_precision=PRECISION)
    value = _type_sum(
        tl.sum(((row[:, None] + col[None, :]) - C + beta * K) * T, axis=0), BN,
        BQ)
    tl.store(DIST + m * N + n0 + it, value, mask=tmask)
    if WANT_PARTS:
        _store_parts(PARTS, T, Xp, m * N + n0, wn, wj, ie, wmask, emask, VQ, D,
                     PRECISION)


@_jit
def _backward_tile_kernel(
        GD, GP, XP, XQ, H1, H2, ROW, COL, BETA, DXP, DH1, DROW, DXQ, DH2, DCOL,
        DBETA, PARTS, M0, N, WANT_PARTS: tl.constexpr, WITH_GP: tl.constexpr,
        VP: tl.constexpr, VQ: tl.constexpr, D: tl.constexpr, BP: tl.constexpr,
        BQ: tl.constexpr, BD: tl.constexpr, BN: tl.constexpr,
        OUTER: tl.constexpr, INNER: tl.constexpr, PROXIMAL: tl.constexpr,
        UNIFORM: tl.constexpr, EPS: tl.constexpr, P: tl.constexpr,
        Q: tl.constexpr, LOG_P: tl.constexpr, LOG_Q: tl.constexpr,
        LOG_T0: tl.constexpr, UNIF: tl.constexpr, TINY: tl.constexpr,
        LO: tl.constexpr, FP32: tl.constexpr, PRECISION: tl.constexpr):
    """Envelope gradient of location ``M0 + pid``, its tiles of types in
    turn, the plans solved again; at the fixed plans:
    ``dX_p += V_q T gp + 2 (rowsum(G) X_p - G X_q)``,
    ``dh1 -= (gd T h2) T^T``, ``dh2_n = -gd_n T_n^T (h1 T_n)``,
    ``dX_q = -2 (G^T X_p - colsum(G) X_q)`` with
    ``G = gd beta T dK/dsq``, ``drow = gd T 1``, ``dcol = gd T^T 1``,
    ``dbeta = gd <K, T>``. Without ``WITH_GP`` the parts received no
    gradient (``gp = 0``, not read). With ``WANT_PARTS`` the parts at the
    plans are written to ``PARTS`` as the forward does."""
    pid = tl.program_id(0).to(tl.int64)
    m = M0 + pid
    ip = tl.arange(0, BP)
    ie = tl.arange(0, BD)
    it = tl.arange(0, BN)
    iw = tl.arange(0, BN * BQ)
    wn = iw // BQ
    wj = iw % BQ
    rmask = ip < VP
    emask = ie < D
    pe_mask = rmask[:, None] & emask[None, :]
    pp_mask = rmask[:, None] & rmask[None, :]
    Xp, h1, row, beta, good_location = _load_location(XP, H1, ROW, BETA, m, ip,
                                                      ie, rmask, emask, VP, D)
    dXp = Xp * 0.0
    dh1 = h1 * 0.0
    drow = row * 0.0
    for tile in range(0, tl.cdiv(N, BN)):
        n0 = tile * BN
        tmask = n0 + it < N
        wmask = (n0 + wn < N) & (wj < VQ)
        we_mask = wmask[:, None] & emask[None, :]
        Xq, col, H2T, good = _load_types(XQ, H2, COL, n0, wn, wj, ie, wmask,
                                         emask, good_location, BN, BQ, VQ, D)
        sq, K, E = _cross_cost_tile(Xp, Xq, BN, BQ, D, FP32, PRECISION)
        T, A = _plan_tile(h1, H2T, row, col, K, beta, rmask, wmask, tmask, BP,
                          BN, BQ, OUTER, INNER, PROXIMAL, UNIFORM, EPS, P, Q,
                          LOG_P, LOG_Q, LOG_T0, UNIF, TINY, LO, FP32,
                          PRECISION)
        T = tl.where(good[None, :], T, INF - INF)
        k = pid * N + n0  # first (location, type) pair of the partials
        if WANT_PARTS:
            _store_parts(PARTS, T, Xp, m * N + n0, wn, wj, ie, wmask, emask,
                         VQ, D, PRECISION)
        gd = tl.load(GD + m * N + n0 + wn, mask=wmask, other=0.0)
        if WITH_GP:
            gp = tl.load(
                GP + (m * N + n0 + wn)[:, None] * VQ * D + wj[:, None] * D +
                ie[None, :], mask=we_mask, other=0.0)
            dXp += VQ * tl.dot(T, gp, input_precision=PRECISION)
        gT = gd[None, :] * T
        drow += tl.sum(gT, axis=1)
        # (gd T_n h2_n) T_n^T summed over the tile's types.
        B = tl.dot(gT, tl.trans(H2T), input_precision=PRECISION)
        dh1 -= tl.dot(B, tl.trans(T), input_precision=PRECISION)
        # Cross cost, dK/dsq = E / d where sq >= 0.
        G = tl.where(sq >= 0, _div(beta * gT * E,
                                   tl.zeros_like(T) + D, FP32), 0.0)
        dXp += 2.0 * (tl.sum(G, axis=1)[:, None] * Xp -
                      tl.dot(G, Xq, input_precision=PRECISION))
        dXq = -2.0 * (tl.dot(tl.trans(G), Xp, input_precision=PRECISION) -
                      tl.sum(G, axis=0)[:, None] * Xq)
        tl.store(
            DXQ + (k + wn)[:, None] * VQ * D + wj[:, None] * D + ie[None, :],
            tl.where(good[:, None], dXq, INF - INF), mask=we_mask)
        # dh2_n[j, k] = -gd_n (T_n^T h1 T_n)[j, k]: the diagonal blocks.
        dH2 = -tl.dot(tl.trans(gT), A, input_precision=PRECISION)
        tl.store(
            DH2 + (k + wn)[:, None] * VQ * VQ + wj[:, None] * VQ + wj[None, :],
            dH2, mask=(wn[:, None] == wn[None, :]) & wmask[:, None]
            & wmask[None, :])
        tl.store(DCOL + (k + wn) * VQ + wj, tl.sum(gT, axis=0), mask=wmask)
        tl.store(DBETA + k + it, _type_sum(tl.sum(K * gT, axis=0), BN, BQ),
                 mask=tmask)
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


#: (columns (types x parts) of a tile, warps of its program), forward and
#: backward: the fastest of bench/tune_triton.py's tiles at the layer's
#: float32 shape on an H100 (docs/benchmarks.md, triton-tuning-cuda). A
#: tile the GPU has too little shared memory for is halved until it fits
#: (:func:`_launch_fitting`).
FORWARD_TILE = (64, 4)
BACKWARD_TILE = (64, 8)
#: ``tl.dot``'s precision for float32 inputs, forward and backward kernel:
#: ``'tf32x3'`` (three TF32 tensor-core products, about float32's
#: accuracy), ``'tf32'`` (one) or ``'ieee'`` (no tensor cores). float64 is
#: always ``'ieee'``. Apart, since a kernel's share of products and of
#: registers decides which is faster.
FORWARD_PRODUCTS = 'tf32x3'
BACKWARD_PRODUCTS = 'tf32x3'

#: (kernel, asked tile, (dtype, V_p, d, N, V_q, device)) -> the tile that
#: fitted, where the asked one did not.
_FITTED_TILES = {}


def _launch_fitting(kernel, tile, key, launch):
    """``launch(tile)``; where the device lacks the resources for a tile
    (Triton raises OutOfResources when it loads the kernel, before anything
    runs) the tile's columns are halved, down to 16, and the tile that fits
    is remembered for ``key``. Returns the tile that ran."""
    from triton.runtime.errors import OutOfResources
    fitted = _FITTED_TILES.get((kernel, tile, key), tile)
    while True:
        try:
            launch(fitted)
        except OutOfResources as err:
            columns, warps = fitted
            if columns <= 16:
                raise
            warnings.warn(
                f'HGW routing {kernel} kernel: a tile of {columns} columns '
                f'needs more than this GPU has ({err}); trying {columns // 2}')
            fitted = (columns // 2, warps)
            continue
        if fitted != tile:
            _FITTED_TILES[(kernel, tile, key)] = fitted
        return fitted


def _tile_meta(meta, N, dtype, tile, products):
    """``(meta, num_warps)`` of a tile kernel with ``tile`` (columns,
    warps): blocks of at least 16 (tl.dot's smallest), BN types per
    program (at least 16 columns, at most ``columns`` unless one type has
    more parts) and the dot precision (``products`` for float32, float64
    exactly)."""
    columns, num_warps = tile
    meta = dict(meta)
    BQ = meta['BQ']
    meta['BP'] = max(16, meta['BP'])
    meta['BD'] = max(16, meta['BD'])
    meta['BN'] = max(1, 16 // BQ, min(columns // BQ,
                                      triton.next_power_of_2(N)))
    meta['PRECISION'] = products if dtype == torch.float32 else 'ieee'
    return meta, num_warps


def _fit_key(X_p, X_q):
    return (X_p.dtype, *X_p.shape[1:], *X_q.shape[:2], X_p.device)


def forward(X_p, X_q, h1, h2, row, col, beta, eps, outer, inner, proximal,
            uniform, distance_only=False):
    """``(dist [M, N], parts [M, N, V_q, d])`` of the op (inputs
    contiguous, one dtype, one device; ``beta`` a 0-dim tensor); with
    ``distance_only`` no parts are formed (an empty [M, N, 0])."""
    M = X_p.shape[0]
    N, V_q, d = X_q.shape
    dist = X_p.new_empty(M, N)
    parts = X_p.new_empty(M, N, *((0, ) if distance_only else (V_q, d)))
    if M * N == 0:
        return dist, parts
    base = _meta(X_p, X_q, eps, outer, inner, proximal, uniform)

    def launch(tile):
        meta, num_warps = _tile_meta(base, N, X_p.dtype, tile,
                                     FORWARD_PRODUCTS)
        grid = (M, triton.cdiv(N, meta['BN']))
        _forward_tile_kernel[grid](X_p, X_q, h1, h2, row, col, beta, dist,
                                   dist if distance_only else parts, N,
                                   not distance_only, num_warps=num_warps,
                                   **meta)

    _launch_fitting('forward', FORWARD_TILE, _fit_key(X_p, X_q), launch)
    return dist, parts


def backward(grad_dist, grad_parts, X_p, X_q, h1, h2, row, col, beta, eps,
             outer, inner, proximal, uniform, want_parts=False):
    """The envelope gradient ``(dX_p, dX_q, dh1, dh2, drow, dcol, dbeta)``
    for upstream gradients ``grad_dist`` [M, N] and ``grad_parts``
    [M, N, V_q, d] (contiguous; empty: none, and the parts' gradient is
    skipped), and the parts [M, N, V_q, d] at the plans solved again (None
    unless ``want_parts``)."""
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
    base = _meta(X_p, X_q, eps, outer, inner, proximal, uniform)
    with_gp = grad_parts.numel() != 0
    per_pair = V_q * (d + V_q + 1) + 1
    chunk = max(1, min(M, BACKWARD_CHUNK_ENTRIES // (N * per_pair)))
    part_xq = X_p.new_empty(chunk, N, V_q, d)
    part_h2 = X_p.new_empty(chunk, N, V_q, V_q)
    part_col = X_p.new_empty(chunk, N, V_q)
    part_beta = X_p.new_empty(chunk, N)
    tile = BACKWARD_TILE
    for start in range(0, M, chunk):
        length = min(chunk, M - start)

        def launch(tile):
            meta, num_warps = _tile_meta(base, N, X_p.dtype, tile,
                                         BACKWARD_PRODUCTS)
            _backward_tile_kernel[(length, )](
                grad_dist, grad_parts if with_gp else grad_dist, X_p, X_q, h1,
                h2, row, col, beta, dX_p, dh1, drow, part_xq, part_h2,
                part_col, part_beta, dX_p if parts is None else parts, start,
                N, bool(want_parts), with_gp, num_warps=num_warps, **meta)

        tile = _launch_fitting('backward', tile, _fit_key(X_p, X_q), launch)
        dX_q += part_xq[:length].sum(0)
        dh2 += part_h2[:length].sum(0)
        dcol += part_col[:length].sum(0)
        dbeta += part_beta[:length].sum()
    return (dX_p, dX_q, dh1, dh2, drow, dcol, dbeta), parts


def compile_report(arch: int = 90, dtype: torch.dtype = torch.float32,
                   V_p: int = 32, V_q: int = 8, d: int = 8, N: int = 32,
                   options: dict = None) -> dict:
    """Compile the forward and backward kernels for an NVIDIA GPU of compute
    capability ``arch`` at one problem shape (``N`` output types), with no
    GPU: Triton's compiler down to PTX, then its bundled ``ptxas -v`` for
    the resource use.

    ``options``: solver options as the routing op takes them (``eps``,
    ``outer_iters``, ``inner_iters``, ``regularizer``, ``routing``), over
    the layer's solver with HGW routing. Returns, per kernel (``'forward'``,
    ``'backward'``): ``num_warps``, ``registers`` per thread,
    ``spill_bytes`` (stores + loads), ``shared_bytes`` (shared memory a
    program needs) and ``tensor_cores`` (the PTX holds
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
    # Imported here: the layer's module and the dispatch import this one.
    from mmhgw.models.layers.hgw_caps_args import SOLVER_DEFAULTS
    from mmhgw.ops.hgw_routing import _kernel_args
    from mmhgw.ops.hgw_routing_reference import check_routing_options
    solver = {**SOLVER_DEFAULTS, 'routing': 'hgw'}
    unknown = sorted(set(options or {}) - set(solver))
    if unknown:
        raise ValueError(f'compile_report: unknown options {unknown}; '
                         f'expected some of {sorted(solver)}')
    solver.update(options or {})
    check_routing_options(**solver)
    X_p = torch.zeros(1, V_p, d, dtype=dtype)
    X_q = torch.zeros(1, V_q, d, dtype=dtype)
    meta = _meta(X_p, X_q, *_kernel_args(solver))
    pointer = {torch.float32: '*fp32', torch.float64: '*fp64'}[dtype]
    try:  # the bundled ptxas by target (Triton >= 3.7) or the only one
        ptxas = get_ptxas(arch).path
    except TypeError:
        ptxas = get_ptxas().path
    report = {}
    for name, kernel, tile, products in (('forward', _forward_tile_kernel,
                                          FORWARD_TILE, FORWARD_PRODUCTS),
                                         ('backward', _backward_tile_kernel,
                                          BACKWARD_TILE, BACKWARD_PRODUCTS)):
        constants, num_warps = _tile_meta(meta, N, dtype, tile, products)
        if name == 'backward':
            constants.update(WANT_PARTS=False, WITH_GP=True)
        else:
            constants['WANT_PARTS'] = True
        # Compile-time constants, the two integer arguments, else pointers.
        signature = {a: pointer for a in kernel.arg_names}
        signature.update({a: 'i32' for a in ('N', 'M0') if a in signature})
        signature.update({a: 'constexpr' for a in constants})
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
            shared_bytes=compiled.metadata.shared,
            tensor_cores=re.search(r'\b(wg)?mma\.', ptx) is not None)
    return report
