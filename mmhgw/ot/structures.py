"""The structures of the HGW problem (paper Eq. 18, 21, 22, Eq. reg): the
bounded embedding distance ``K``, the observed structures ``C_obs``, their
mixture ``C`` and the regulariser's KL loss. Pure torch.
"""
from typing import Optional, Tuple, Union

import torch
import torch.nn.functional as F
from torch import Tensor

from .numerics import (DISTANCE_FLOOR, bound_distance, power_of_two_scale,
                       safe_log, scaled_squared_distance)


def embedding_distance(X: Tensor, Y: Tensor,
                       floor: float = DISTANCE_FLOOR) -> Tensor:
    """Bounded pairwise distance ``k(x, y)`` used for ``K`` (paper Eq. 21-22).

    ``k(x, y) = floor + (1 - floor) * (1 - exp(-||x - y||^2 / d))``.

    Chosen so that ``k`` lies in ``[floor, 1)``: bounded like the Zipf matrix
    of Eq. 18 it is mixed with, strictly positive so the KL loss may take its
    log, and smooth at ``x = y`` (the squared norm has no square root, hence
    no NaN gradient at zero distance). Dividing by the embedding size ``d``
    keeps the scale independent of ``d``. The squared distances are taken on
    embeddings scaled by powers of two (:func:`power_of_two_scale`: exact,
    and finite where the squares would overflow).

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


def mix_structure(C_obs: Tensor, C_emb: Tensor, beta: Union[float,
                                                            Tensor]) -> Tensor:
    """``C(X) = (1 - beta) C_obs + beta K(X, X)`` (paper, below Eq. 21).

    Both inputs in ``(0, 1]`` keep the mixture in ``(0, 1]`` for any
    ``beta`` in ``[0, 1]``.
    """
    return (1 - beta) * C_obs + beta * C_emb


def structure(X: Tensor, beta: Union[float,
                                     Tensor], obs: Optional[Tensor] = None,
              use_observed: bool = True) -> Tuple[Tensor, Tensor, Tensor]:
    """``(C, K, C_obs)`` of embeddings X [..., V, d], each [..., V, V]:
    ``K = K(X, X)`` (:func:`embedding_distance`), ``C_obs`` the given
    observed structure ``obs`` or else the co-activations of X
    (:func:`zipf_structure`, Eq. 18), ``C = (1 - beta) C_obs + beta K``
    (Eq. 21). Without observed structure (``use_observed=False``): ``C = K``
    and ``C_obs`` all ones (an expanded view: the regulariser's target)."""
    K = embedding_distance(X, X)
    if not use_observed:
        return K, K, K.new_ones(()).expand_as(K)
    if obs is None:
        obs = zipf_structure(X)
    return mix_structure(obs, K, beta), K, obs


def presence(capsules: Tensor, dim: int = -1) -> Tensor:
    """How present each capsule is: ``a = s / (1 + s)`` in ``[0, 1)``, with
    ``s = ||x||^2 / d`` the squared length per dimension of the capsule
    vectors along ``dim`` (which is reduced)."""
    # Clamped so that capsules whose squares overflow are fully present
    # (inf / inf would be NaN); finite s is unchanged.
    s = capsules.pow(2).mean(dim).clamp_max(torch.finfo(capsules.dtype).max)
    return s / (1 + s)


def zipf_structure(parts: Tensor) -> Tensor:
    """Observed structure ``C_obs`` of a set of capsule parts (paper Eq. 18).

    ``c_ij = 1 / (w_ij + 1)`` with interaction count ``w_ij = a_i a_j``, the
    co-activation of parts ``i`` and ``j``, ``a`` their :func:`presence`.
    Parts that are both fully present interact once (c = 1/2); an absent
    part has no interaction (c = 1). So ``C_obs`` lies in ``(1/2, 1]``:
    bounded and positive, as the KL loss needs, and a deterministic function
    of the input (no sampling), hence deterministic in eval mode.

    Args:
        parts: [..., V, d].

    Returns:
        [..., V, V].
    """
    a = presence(parts)
    return 1 / (1 + a.unsqueeze(-1) * a.unsqueeze(-2))


def count_structure(x: Tensor, types: int, kernel_size, stride=1, padding=0,
                    dilation=1) -> Tensor:
    """Observed structure ``C_obs`` of every k x k patch of an input
    capsule map, from interaction counts (paper Eq. 18).

    ``w_ij`` counts the positions of the patch where input capsule types
    ``i`` and ``j`` are both present, softly: ``w_ij = sum_r a_i(r) a_j(r)``
    over the patch positions ``r``, with ``a`` the :func:`presence` of the
    input capsules (their lengths); ``c_ij = 1 / (w_ij + 1)``, 1 where no
    position holds both (padding holds nothing). ``w`` lies in
    ``[0, k * k]``, so ``C_obs`` in ``[1 / (k * k + 1), 1]``. The counts are
    observations of the data: computed without gradient.

    Args:
        x: [B, types * dim, H, W] type-major input capsules.
        types: input capsule types (V).
        kernel_size, stride, padding, dilation: the patch grid, as
            ``nn.Conv2d`` (so the output locations are the layer's).

    Returns:
        [B, H' * W', V, V].
    """
    with torch.no_grad():
        B, C, H, W = x.shape
        a = presence(x.view(B, types, C // types, H, W), dim=2)
        patches = F.unfold(a, kernel_size, dilation=dilation, padding=padding,
                           stride=stride)
        patches = patches.view(B, types, -1, patches.shape[-1])
        counts = torch.einsum('birl,bjrl->blij', patches, patches)
        return 1 / (1 + counts)


def kl_off_diagonal(A: Tensor, B: Tensor) -> Tensor:
    """``L(A, B) = A log(A / B) - A + B`` of paper Eq. reg, averaged over
    problems and over the off-diagonal entries of the [..., V, V] matrices
    (logs through :func:`safe_log`); a 0-dim tensor.

    The diagonal is left out: an embedding's distance to itself sits at the
    distance floor while ``C_obs`` has ``1 / (1 + a_i^2) >= 1/2`` there, a
    constant offset of about 0.5 per entry with zero gradient (a part does
    not interact with itself) that would only swamp the logged value.
    With ``V = 1`` there is no off-diagonal entry and the loss is 0.
    """
    V = A.shape[-1]
    if V < 2:
        # A single part has no off-diagonal entry: nothing to regularise
        # (averaging over V (V - 1) = 0 entries would give NaN).
        return A.new_zeros(())
    off = ~torch.eye(V, dtype=torch.bool, device=A.device)
    per_entry = A * (safe_log(A) - safe_log(B)) - A + B
    return (per_entry * off).sum((-1, -2)).mean() / (V * (V - 1))
