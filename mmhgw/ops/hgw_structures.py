"""The components' side of the HGW structures as one op: from the
components X_p [..., V_p, d] of every location to their mixed structure
``C_p = (1 - beta) C_obs + beta K(X_p, X_p)`` (paper Eq. 18, 21) and the row
factor ``f1(C_p) p`` of the KL loss (Eq. 10, uniform ``p``), which with
``h1 = C_p`` are what the routing op takes from the components' side; in
training also the regulariser's term of the components (paper Eq. reg:
the off-diagonal KL of ``K(X_p, X_p)`` against the observed structure).

:func:`component_structures_reference` is the specification (the
:mod:`mmhgw.ot` composition); the C++ kernels
(``csrc/hgw_structures_cpu.cpp``) compute the same one location at a time,
without the [..., V_p, V_p] intermediates of the composition, and their
gradient from the components alone (nothing else is kept for backward).
:func:`component_structures` and :func:`component_terms` run the kernels
where the routing backend is the C++ one (and, for a gradient, the observed
structure is the components' co-activations or none), the reference
otherwise (other devices, an observed structure given with a gradient,
tracing and export, which record the composition).
"""
from typing import Optional, Tuple

import torch
from torch import Tensor

from mmhgw.ot import DISTANCE_FLOOR, kl_off_diagonal, source_factors, structure
from .hgw_routing import _load_ext, resolve_backend


def component_structures_reference(
        X_p: Tensor, beta: Tensor, obs_p: Optional[Tensor] = None,
        use_observed: bool = True) -> Tuple[Tensor, Tensor]:
    """``(C_p [..., V_p, V_p], row [..., V_p])`` of components X_p
    [..., V_p, d]: :func:`mmhgw.ot.structure` (``obs_p`` the observed
    structure, the co-activations of X_p when None) and
    :func:`mmhgw.ot.source_factors` of the KL loss with ``p = 1 / V_p``."""
    return _reference_terms(X_p, beta, obs_p, use_observed, False)[:2]


def _reference_terms(X_p, beta, obs_p, use_observed, want_kl):
    """The composition's ``(C_p, row, L(K(X_p, X_p), C_obs) or None)``."""
    C_p, K, obs = structure(X_p, beta, obs_p, use_observed)
    p = X_p.new_full((X_p.shape[-2], ), 1.0 / X_p.shape[-2])
    kl = kl_off_diagonal(K, obs.detach()) if want_kl else None
    return C_p, source_factors(C_p, p)[0], kl


def _needs_grad(*tensors) -> bool:
    return torch.is_grad_enabled() and any(t is not None and t.requires_grad
                                           for t in tensors)


def runs_component_kernels(X_p: Tensor, beta: Tensor, obs_p: Optional[Tensor],
                           backend: str) -> bool:
    """Whether :func:`component_structures` and :func:`component_terms`
    take the C++ kernels for these arguments."""
    # Graph captures (torch.compile, torch.export, jit traces, ONNX) get
    # the composition, which they can record; so do fake tensors.
    if (torch.compiler.is_compiling() or torch.jit.is_tracing()
            or torch.onnx.is_in_onnx_export()):
        return False
    tensors = [t for t in (X_p, beta, obs_p) if t is not None]
    if any(type(t) is not torch.Tensor for t in tensors):
        return False
    # The backward kernel derives C_obs from the components.
    if obs_p is not None and _needs_grad(*tensors):
        return False
    if X_p.dtype not in (torch.float32, torch.float64):
        return False
    return resolve_backend(backend, X_p.device) == 'cpp'


#: The name the structures kernels' errors go by.
STRUCTURES_OP = 'mmhgw::hgw_structures'


class _ComponentTerms(torch.autograd.Function):
    """``(C_p, row, kl)`` of components [M, V_p, d] by the C++ kernels, the
    observed structure being their co-activations or none; keeps X_p and
    beta for backward."""

    @staticmethod
    def forward(ctx, X, beta, use_observed, want_kl):
        C_p, row, kl = _load_ext().hgw_structures_forward(
            X=X, beta=beta.reshape(1), use_observed=use_observed,
            floor=DISTANCE_FLOOR, want_kl=want_kl)
        ctx.save_for_backward(X, beta)
        ctx.use_observed = use_observed
        return C_p, row, kl

    @staticmethod
    def backward(ctx, grad_C, grad_row, grad_kl):
        X, beta = ctx.saved_tensors
        M, V = X.shape[:2]
        if grad_C is None:
            grad_C = X.new_zeros(M, V, V)
        if grad_row is None:
            grad_row = X.new_zeros(M, V)
        if grad_kl is not None and grad_kl.numel() == 0:
            grad_kl = None
        grad_X, grad_beta = _ComponentTermsBackward.apply(
            grad_C, grad_row, grad_kl, X, beta, ctx.use_observed)
        return grad_X, grad_beta.reshape(beta.shape), None, None


class _ComponentTermsBackward(torch.autograd.Function):
    """The backward kernel, as a node that refuses to be differentiated
    (second-order gradients) with an error naming the op."""

    @staticmethod
    def forward(ctx, grad_C, grad_row, grad_kl, X, beta, use_observed):
        return tuple(_load_ext().hgw_structures_backward(
            grad_C=grad_C.contiguous(), grad_row=grad_row.contiguous(),
            grad_kl=None if grad_kl is None else grad_kl.contiguous(), X=X,
            beta=beta.reshape(1), use_observed=use_observed,
            floor=DISTANCE_FLOOR))

    @staticmethod
    def backward(ctx, *grads):
        raise RuntimeError(
            f'{STRUCTURES_OP} is once differentiable: its backward (the '
            f'gradient of the components\' structures and regulariser term) '
            f'has no gradient of its own, so second-order gradients (double '
            f'backward, gradient penalties) through the capsule layer are not '
            f'supported')


def _kernel_terms(X_p, beta, obs_p, use_observed, want_kl):
    """The C++ kernels' ``(C_p, row, kl [lead] or None)``."""
    V_p, d = X_p.shape[-2:]
    lead = X_p.shape[:-2]
    X = X_p.reshape(-1, V_p, d).contiguous()
    if _needs_grad(X_p, beta):
        C_p, row, kl = _ComponentTerms.apply(X, beta, use_observed, want_kl)
    else:
        obs = None
        if use_observed and obs_p is not None:
            obs = obs_p.to(X_p.dtype).expand(*lead, V_p,
                                             V_p).reshape(-1, V_p,
                                                          V_p).contiguous()
        C_p, row, kl = _load_ext().hgw_structures_forward(
            X=X, beta=beta.reshape(1), obs=obs, use_observed=use_observed,
            floor=DISTANCE_FLOOR, want_kl=want_kl)
    return (C_p.view(*lead, V_p,
                     V_p), row.view(*lead,
                                    V_p), kl.view(lead) if want_kl else None)


def component_structures(X_p: Tensor, beta: Tensor,
                         obs_p: Optional[Tensor] = None,
                         use_observed: bool = True,
                         backend: str = 'auto') -> Tuple[Tensor, Tensor]:
    """:func:`component_structures_reference`, by the C++ kernels where
    ``backend`` (the routing op's, see :func:`mmhgw.ops.resolve_backend`)
    runs them (see the module's docstring).

    Args:
        X_p: [..., V_p, d] components.
        beta: 0-dim (or one-element) mixing weight, X_p's dtype.
        obs_p: [..., V_p, V_p] observed structure of the components, or
            None for their co-activations; ignored without observed
            structure.
        use_observed: False for ``C_p = K(X_p, X_p)``.
        backend: the routing op's backend.
    """
    if not runs_component_kernels(X_p, beta, obs_p, backend):
        return component_structures_reference(X_p, beta, obs_p, use_observed)
    return _kernel_terms(X_p, beta, obs_p, use_observed, False)[:2]


def component_terms(X_p: Tensor, beta: Tensor, obs_p: Optional[Tensor] = None,
                    use_observed: bool = True,
                    backend: str = 'auto') -> Tuple[Tensor, Tensor, Tensor]:
    """:func:`component_structures` and the regulariser's term of the
    components: ``(C_p, row, L(K(X_p, X_p), C_obs))`` with
    :func:`mmhgw.ot.kl_off_diagonal` (0-dim, averaged over the leading
    dims; ``C_obs`` a fixed target, all ones without observed structure)."""
    if not runs_component_kernels(X_p, beta, obs_p, backend):
        return _reference_terms(X_p, beta, obs_p, use_observed, True)
    C_p, row, kl = _kernel_terms(X_p, beta, obs_p, use_observed, True)
    return C_p, row, kl.mean()
