"""The structures of an HGWCaps layer (paper Eq. 18, 21, Eq. reg): what its
solver sees and what its regulariser E compares, from the components, the
subcapsules and the layer's input."""
from typing import NamedTuple, Optional, Tuple

import torch.nn.functional as F
from torch import Tensor, nn

from mmhgw.ops import component_structures, component_terms
from mmhgw.ot import (GWFactors, count_structure, gw_factors, kl_off_diagonal,
                      structure, target_factors, uniform_marginals)


class Structures(NamedTuple):
    """The structures of Eq. 21 for components X_p [B, L, V_p, d] and the
    N subcapsules: ``C_p`` [B, L, V_p, V_p] and ``C_q`` [N, V_q, V_q] (what
    the solver sees), ``beta`` (0-dim: the mixing and Wasserstein weight),
    and the regulariser's embedding distances ``K_pp``, ``K_qq`` with their
    targets, the observed structures ``obs_p``, ``obs_q`` (Eq. reg)."""
    C_p: Tensor
    C_q: Tensor
    beta: Tensor
    K_pp: Tensor
    obs_p: Tensor
    K_qq: Tensor
    obs_q: Tensor

    def factors(self) -> GWFactors:
        """The routing op's :class:`mmhgw.ot.GWFactors` of ``C_p`` and
        ``C_q`` with uniform marginals."""
        p, q = uniform_marginals(self.C_p.shape[-1], self.C_q.shape[-1],
                                 self.C_p)
        return gw_factors(self.C_p, self.C_q, p, q)


class RoutingInputs(NamedTuple):
    """The inputs of :func:`mmhgw.ops.hgw_routing` for one forward pass:
    ``hgw_routing(*inputs, **layer.routing_options())``. ``X_p``
    [B, L, V_p, d], ``X_q`` [N, V_q, d], :class:`mmhgw.ot.GWFactors` and
    ``beta`` (0-dim)."""
    X_p: Tensor
    X_q: Tensor
    factors: GWFactors
    beta: Tensor


def observed_input(x: Tensor, types: int, embed: nn.Conv2d, use_observed: bool,
                   observed: str) -> Optional[Tensor]:
    """``C_obs`` [B, L, V_p, V_p] of the input patches of the embedding
    convolution ``embed`` when it is observed in the input ``x``
    (``observed='counts'``), else None."""
    if not (use_observed and observed == 'counts'):
        return None
    padding = embed.padding
    if embed.padding_mode != 'zeros' or isinstance(padding, str):
        # The patches the embedding sees ('same' may pad one side more, a
        # padding mode pads with the image's own pixels): padded as the
        # convolution pads them, then counted without padding of their own.
        mode = ('constant'
                if embed.padding_mode == 'zeros' else embed.padding_mode)
        x = F.pad(x, embed._reversed_padding_repeated_twice, mode=mode)
        padding = 0
    return count_structure(x, types, embed.kernel_size, embed.stride, padding,
                           embed.dilation).to(x.dtype)


def layer_structures(X_p: Tensor, X_q: Tensor, beta: Tensor,
                     obs_p: Optional[Tensor], use_observed: bool,
                     observed: str) -> Structures:
    """:class:`Structures` of components X_p [B, L, V_p, d] and subcapsules
    X_q [N, V_q, d]: ``C = (1 - beta) C_obs + beta K(X, X)`` (Eq. 21).

    ``obs_p``: the input's observed structure (:func:`observed_input`, for
    the same locations as X_p) when ``observed='counts'``; otherwise both
    ``C_obs`` are co-activations (Eq. 18). Without observed structure
    (``use_observed=False``): ``C = K(X, X)`` and the targets are all ones
    (Eq. 18 with nothing observed).
    """
    _check_observed(obs_p, use_observed, observed)
    C_p, K_pp, obs_p = structure(X_p, beta, obs_p, use_observed)
    C_q, K_qq, obs_q = structure(X_q, beta, None, use_observed)
    return Structures(C_p, C_q, beta, K_pp, obs_p, K_qq, obs_q)


def layer_factors(X_p: Tensor, X_q: Tensor, beta: Tensor,
                  obs_p: Optional[Tensor], use_observed: bool, observed: str,
                  backend: str) -> GWFactors:
    """``layer_structures(...).factors()`` (same arguments) without the
    regulariser's terms, the components' side by
    :func:`mmhgw.ops.component_structures` (its C++ kernels when
    ``backend``, the routing op's, runs them)."""
    _check_observed(obs_p, use_observed, observed)
    C_p, row = component_structures(X_p, beta, obs_p, use_observed, backend)
    col, h2 = _subcapsule_side(X_q, beta, use_observed)[:2]
    return GWFactors(row, col, C_p, h2)


def layer_terms(X_p: Tensor, X_q: Tensor, beta: Tensor,
                obs_p: Optional[Tensor], use_observed: bool, observed: str,
                backend: str, reg_weight: float) -> Tuple[GWFactors, Tensor]:
    """:func:`layer_factors` and the regulariser E of :func:`regulariser`
    (same arguments), the components' side of both by
    :func:`mmhgw.ops.component_terms` (its C++ kernels, which keep only the
    components for backward, when ``backend`` runs them)."""
    _check_observed(obs_p, use_observed, observed)
    C_p, row, kl_p = component_terms(X_p, beta, obs_p, use_observed, backend)
    col, h2, K_qq, obs_q = _subcapsule_side(X_q, beta, use_observed)
    return (GWFactors(row, col, C_p, h2),
            _weighted(reg_weight, kl_p, kl_off_diagonal(K_qq, obs_q.detach())))


def _subcapsule_side(X_q: Tensor, beta: Tensor, use_observed: bool):
    """``(col, h2, K_qq, C_obs_q)`` of the subcapsules X_q [N, V_q, d]."""
    C_q, K_qq, obs_q = structure(X_q, beta, None, use_observed)
    q = C_q.new_full((C_q.shape[-1], ), 1.0 / C_q.shape[-1])
    col, h2 = target_factors(C_q, q)
    return col, h2, K_qq, obs_q


def _check_observed(obs_p: Optional[Tensor], use_observed: bool,
                    observed: str):
    if use_observed and observed == 'counts' and obs_p is None:
        raise ValueError("observed='counts' needs the input's observed "
                         'structure (obs_p)')


def regulariser(s: Structures, reg_weight: float) -> Tensor:
    """``E = reg_weight (L(K_pp, C_obs_p) + L(K_qq, C_obs_q))`` (Eq. reg,
    :func:`mmhgw.ot.kl_off_diagonal`, the observed structures as fixed
    targets)."""
    return _weighted(reg_weight, kl_off_diagonal(s.K_pp, s.obs_p.detach()),
                     kl_off_diagonal(s.K_qq, s.obs_q.detach()))


def _weighted(reg_weight: float, kl_p: Tensor, kl_q: Tensor) -> Tensor:
    """E of its two domains' terms (Eq. reg)."""
    return reg_weight * (kl_p + kl_q)
