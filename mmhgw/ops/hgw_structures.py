"""The components' side of the HGW structures as one op: from the
components X_p [..., V_p, d] of every location to their mixed structure
``C_p = (1 - beta) C_obs + beta K(X_p, X_p)`` (paper Eq. 18, 21) and the row
factor ``f1(C_p) p`` of the KL loss (Eq. 10, uniform ``p``), which with
``h1 = C_p`` are what the routing op takes from the components' side.

:func:`component_structures_reference` is the specification (the
:mod:`mmhgw.ot` composition the layer differentiates); the C++ kernel
(``csrc/hgw_structures_cpu.cpp``) computes the same one location at a time,
without the [..., V_p, V_p] intermediates of the composition and without
autograd. :func:`component_structures` runs the kernel where nothing needs
a gradient (inference) and the routing backend is the C++ one, the
reference otherwise (training, other devices, tracing and export, which
record the composition).
"""
from typing import Optional, Tuple

import torch
from torch import Tensor

from mmhgw.ot import DISTANCE_FLOOR, source_factors, structure
from .hgw_routing import _load_ext, resolve_backend


def component_structures_reference(
        X_p: Tensor, beta: Tensor, obs_p: Optional[Tensor] = None,
        use_observed: bool = True) -> Tuple[Tensor, Tensor]:
    """``(C_p [..., V_p, V_p], row [..., V_p])`` of components X_p
    [..., V_p, d]: :func:`mmhgw.ot.structure` (``obs_p`` the observed
    structure, the co-activations of X_p when None) and
    :func:`mmhgw.ot.source_factors` of the KL loss with ``p = 1 / V_p``."""
    C_p = structure(X_p, beta, obs_p, use_observed)[0]
    p = X_p.new_full((X_p.shape[-2], ), 1.0 / X_p.shape[-2])
    return C_p, source_factors(C_p, p)[0]


def _runs_kernel(X_p: Tensor, beta: Tensor, obs_p: Optional[Tensor],
                 backend: str) -> bool:
    """Whether :func:`component_structures` can take the C++ kernel."""
    # Graph captures (torch.compile, torch.export, jit traces, ONNX) get
    # the composition, which they can record; so do fake tensors.
    if (torch.compiler.is_compiling() or torch.jit.is_tracing()
            or torch.onnx.is_in_onnx_export()):
        return False
    tensors = [t for t in (X_p, beta, obs_p) if t is not None]
    if any(type(t) is not torch.Tensor for t in tensors):
        return False
    if torch.is_grad_enabled() and any(t.requires_grad for t in tensors):
        return False
    if X_p.dtype not in (torch.float32, torch.float64):
        return False
    return resolve_backend(backend, X_p.device) == 'cpp'


def component_structures(X_p: Tensor, beta: Tensor,
                         obs_p: Optional[Tensor] = None,
                         use_observed: bool = True,
                         backend: str = 'auto') -> Tuple[Tensor, Tensor]:
    """:func:`component_structures_reference`, by the C++ kernel where
    nothing needs a gradient and ``backend`` (the routing op's, see
    :func:`mmhgw.ops.resolve_backend`) runs the C++ kernels.

    Args:
        X_p: [..., V_p, d] components.
        beta: 0-dim (or one-element) mixing weight, X_p's dtype.
        obs_p: [..., V_p, V_p] observed structure of the components, or
            None for their co-activations; ignored without observed
            structure.
        use_observed: False for ``C_p = K(X_p, X_p)``.
        backend: the routing op's backend.
    """
    if not _runs_kernel(X_p, beta, obs_p, backend):
        return component_structures_reference(X_p, beta, obs_p, use_observed)
    V_p, d = X_p.shape[-2:]
    lead = X_p.shape[:-2]
    obs = None
    if use_observed and obs_p is not None:
        obs = obs_p.to(X_p.dtype).expand(*lead, V_p,
                                         V_p).reshape(-1, V_p,
                                                      V_p).contiguous()
    C_p, row = _load_ext().hgw_structures_forward(
        X=X_p.reshape(-1, V_p, d).contiguous(), beta=beta.reshape(1), obs=obs,
        use_observed=use_observed, floor=DISTANCE_FLOOR)
    return C_p.view(*lead, V_p, V_p), row.view(*lead, V_p)
