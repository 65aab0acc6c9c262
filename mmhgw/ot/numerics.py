"""Floating-point building blocks of the solver: guarded logs and exps, and
bounded embedding distances that cannot overflow.

Every function takes arbitrary leading (batch) dims; pure torch.
"""
import math

import torch
from torch import Tensor

#: Lower bound of the embedding distance (:func:`bound_distance`). The KL
#: loss takes ``log`` of the structure matrices, and with ``beta = 1`` (no
#: observed structure) those are pure embedding distances whose diagonal
#: would otherwise be exactly 0.
DISTANCE_FLOOR = 1e-2

#: Smallest ``eps`` of the solver: ``2^-63`` (about 1.1e-19). The
#: log-kernel ``-cost / eps`` then stays below ``2^63 |cost|`` in magnitude:
#: finite in float32 for every cost below 3.7e19 (the structures and cross
#: costs are bounded by a few units), summed over proximal steps without
#: overflow, and far above the padding value -1e30 of the Triton kernels.
#: Smaller values underflow or overflow float32 iterates into NaN (1e-300
#: is 0 in float32).
MIN_EPS = 2.0**-63


def safe_log(x: Tensor) -> Tensor:
    """``log(max(x, tiny))``, ``tiny`` the dtype's smallest normal number.

    The one floor applied where a log meets a zero (zero marginal entries,
    vanishing plan entries): ``log(0) = -inf`` would turn a row of the
    log-domain Sinkhorn into ``-inf - (-inf) = NaN``; the floor keeps it
    finite (about -87.3 in float32, -708.4 in float64), i.e. a zero-mass row
    keeps a mass below anything the dtype can add to a sum.
    """
    return torch.log(x.clamp_min(torch.finfo(x.dtype).tiny))


def exp_floor(dtype: torch.dtype) -> float:
    """Smallest exponent :func:`floored_exp` evaluates: ``log(tiny) / 2``.

    ``exp`` of it is ``sqrt(tiny)`` (1e-19 in float32, 1e-154 in float64),
    so not only every floored value but also the product of two of them is
    a normal number: subnormal numbers take a slow microcode path on x86,
    in ``exp`` itself and in every later product (the Sinkhorn scalings
    multiply the kernel entries; see docs/benchmarks.md for the cost).
    """
    return 0.5 * math.log(torch.finfo(dtype).tiny)


def floored_exp(x: Tensor) -> Tensor:
    """``exp(max(x, exp_floor))`` (:func:`exp_floor` of ``x``'s dtype).

    Below the floor the result is negligible anyway: clamping changes a sum
    of ``n`` terms by at most ``n sqrt(tiny)`` (absolute), far below the
    dtype's resolution of the masses summed here (>= 1e-3), and keeps
    ``exp`` and the products after it fast on the ``-cost / eps`` logits of
    small ``eps``, most of which underflow.
    """
    return torch.exp(x.clamp_min(exp_floor(x.dtype)))


def logsumexp(x: Tensor, dim: int) -> Tensor:
    """``log(sum(exp(x), dim))``, max-shifted, through :func:`floored_exp`.

    Inputs are finite (every log of the solver goes through
    :func:`safe_log`), so the shift is finite.
    """
    m = x.amax(dim, keepdim=True)
    return torch.log(floored_exp(x - m).sum(dim)) + m.squeeze(dim)


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
    """``k = floor + (1 - floor) (1 - exp(-max(sq, 0) / d))`` in
    ``[floor, 1)`` from squared distances ``sq`` between ``d``-dimensional
    embeddings (negative round-off clamped); ``expm1`` keeps small
    distances accurate."""
    return floor + (1 - floor) * (-torch.expm1(-sq.clamp_min(0) / d))
