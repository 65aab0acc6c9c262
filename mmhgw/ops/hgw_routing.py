"""HGW routing as one op: from embeddings and structure factors to the HGW
distance and the barycentric parts (or poses) of every (location, output
type) pair. What it computes is specified in plain torch by
:mod:`mmhgw.ops.hgw_routing_reference`; this module holds the public op, the
dispatch to the backends and the custom-op registration.

Backends: ``'torch'`` (:func:`hgw_routing_reference`, the specification),
``'cpp'`` (``mmhgw._ext``, built by ``pip install -e .``) and ``'triton'``
(CUDA, or the Triton interpreter). The fused backends hold each problem in
registers or a small workspace and write nothing of size
``M x N x V_p x V_q``. Every backend owns its backward, the envelope
gradient (exact at a converged plan): the plan is solved again in backward
and held fixed, so nothing plan-sized is kept between forward and backward.

The op is the ``torch.library`` custom op ``mmhgw::hgw_routing`` (its
backward the custom op ``mmhgw::hgw_routing_backward``), with a fake kernel:
``torch.compile`` (no graph break), ``torch.export`` and ``torch.jit.trace``
record one node that runs the fused kernels, and FLOP counters find it by
name (:mod:`mmhgw.analysis.flops`). For ONNX, which cannot hold it, it is
decomposed into the reference (:func:`hgw_routing_decomposition`).

Numerics, the same on every backend: the squared embedding distances are
taken on embeddings scaled by powers of two (exact; finite for embeddings
whose squares overflow); a problem with a NaN or infinite input gets a NaN
plan, hence NaN outputs and gradients
(:func:`~mmhgw.ops.hgw_routing_reference.poisoned_problems`); the op
is once differentiable (double backward raises an error naming it).
"""
import os
import warnings
from typing import Optional, Tuple

import torch
from torch import Tensor

from mmhgw.arg_checks import check_choice
from .hgw_routing_reference import (TorchKernels, check_routing_args,
                                    factor_args, hgw_routing_reference,
                                    pose_map)

BACKENDS = ('auto', 'torch', 'cpp', 'triton')

_ext = None
_ext_error: Optional[str] = None
_warned_fallback = False


def _load_ext():
    """The compiled CPU kernels, or None (the reason in ``_ext_error``)."""
    global _ext, _ext_error
    if _ext is None and _ext_error is None:
        try:
            from mmhgw import _ext as ext
            _ext = ext
        except ImportError as err:
            _ext_error = str(err)
    return _ext


def cpp_available() -> bool:
    """Whether the C++ extension ``mmhgw._ext`` is built and importable."""
    return _load_ext() is not None


def triton_available() -> bool:
    """Whether the Triton backend can run: Triton importable, and CUDA or
    the Triton interpreter (``TRITON_INTERPRET=1``)."""
    from . import hgw_routing_triton
    return hgw_routing_triton.available()


def _kernel_args(options):
    return (float(options['eps']), int(options['outer_iters']),
            int(options['inner_iters']), options['regularizer'] == 'proximal',
            options['routing'] == 'uniform')


class _CppKernels:
    """The C++ kernels of ``mmhgw/ops/csrc/hgw_routing_cpu.cpp``; their
    forward applies the pose map itself (:func:`_forward`)."""

    fuses_pose_map = True

    @staticmethod
    def forward(X_p, X_q, h1, h2, row, col, beta, options, pose_weight=None,
                distance_only=False):
        return tuple(
            _ext.hgw_routing_forward(X_p, X_q, h1, h2, row, col, beta,
                                     *_kernel_args(options), pose_weight,
                                     distance_only))

    @staticmethod
    def backward(grad_dist, grad_parts, X_p, X_q, h1, h2, row, col, beta,
                 options, want_parts):
        out = _ext.hgw_routing_backward(grad_dist, grad_parts, X_p, X_q, h1,
                                        h2, row, col, beta,
                                        *_kernel_args(options), want_parts)
        grads = (*out[:6], out[6].to(beta.dtype).view_as(beta))
        return grads, out[7] if want_parts else None


class _TritonKernels:
    """The Triton kernels of :mod:`mmhgw.ops.hgw_routing_triton`."""

    @staticmethod
    def forward(X_p, X_q, h1, h2, row, col, beta, options,
                distance_only=False):
        from . import hgw_routing_triton
        return hgw_routing_triton.forward(X_p, X_q, h1, h2, row, col, beta,
                                          *_kernel_args(options),
                                          distance_only)

    @staticmethod
    def backward(grad_dist, grad_parts, X_p, X_q, h1, h2, row, col, beta,
                 options, want_parts):
        from . import hgw_routing_triton
        return hgw_routing_triton.backward(grad_dist, grad_parts, X_p, X_q, h1,
                                           h2, row, col, beta,
                                           *_kernel_args(options), want_parts)


KERNELS = dict(torch=TorchKernels, cpp=_CppKernels, triton=_TritonKernels)


def _kernel_layout(X_p, X_q, h1, h2, row, col):
    """The kernels' layout: locations flattened ([M, V_p, d], [M, V_p,
    V_p], [M, V_p]), every tensor contiguous."""
    V_p, d = X_p.shape[-2:]
    return (X_p.reshape(-1, V_p, d).contiguous(), X_q.contiguous(),
            h1.reshape(-1, V_p, V_p).contiguous(), h2.contiguous(),
            row.reshape(-1, V_p).contiguous(), col.contiguous())


def _options(eps, outer_iters, inner_iters, regularizer, routing):
    return dict(eps=eps, outer_iters=outer_iters, inner_iters=inner_iters,
                regularizer=regularizer, routing=routing)


# --------------------------------------------------- the operator mmhgw::*
# The op is a torch.library custom op: eager calls, torch.compile,
# torch.export and torch.jit.trace all see one opaque node that runs the
# fused kernels, with a fake kernel for shapes and a registered backward.
# Its backward is a second custom op (the envelope gradient, which solves
# the plans again), whose own backward raises: the op is once
# differentiable. Inputs keep the caller's leading dims [...] of X_p (the
# layer's components are a permuted view of its embedding; a flattened
# copy would be one more layer-output-sized tensor kept for backward).
# With distance_only the kernels form no parts: the second output is empty
# ([..., N, 0]) and backward skips the parts' gradient, as it does whenever
# the second output received no gradient.
OP_NAME = 'mmhgw::hgw_routing'


@torch.library.custom_op(OP_NAME, mutates_args=())
def _routing_op(X_p: Tensor, X_q: Tensor, h1: Tensor, h2: Tensor, row: Tensor,
                col: Tensor, beta: Tensor, pose_weight: Optional[Tensor],
                eps: float, outer_iters: int, inner_iters: int,
                regularizer: str, routing: str, backend: str,
                distance_only: bool) -> Tuple[Tensor, Tensor]:
    """``(dist [..., N], parts [..., N, V_q, d] or poses [..., N, O])``,
    or ``(dist, [..., N, 0])`` with ``distance_only``; inputs as
    :func:`hgw_routing` (one dtype, float32 or float64; ``beta`` a 0-dim
    tensor)."""
    lead, d = X_p.shape[:-2], X_p.shape[-1]
    N, V_q, _ = X_q.shape
    options = _options(eps, outer_iters, inner_iters, regularizer, routing)
    if X_p.numel() == 0:
        dist = X_p.new_zeros(0, N)
        if distance_only:
            out = X_p.new_zeros(0, N, 0)
        else:
            parts = X_p.new_zeros(0, N, V_q, d)
            out = parts if pose_weight is None else pose_map(
                parts, pose_weight)
    else:
        kernels = KERNELS[resolve_backend(backend, X_p.device)]
        flat = _kernel_layout(X_p, X_q, h1, h2, row, col)
        if distance_only:
            dist, out = kernels.forward(*flat, beta, options,
                                        distance_only=True)
        elif pose_weight is not None and getattr(kernels, 'fuses_pose_map',
                                                 False):
            dist, out = kernels.forward(*flat, beta, options,
                                        pose_weight.contiguous())
        else:
            dist, parts = kernels.forward(*flat, beta, options)
            out = parts if pose_weight is None else pose_map(
                parts, pose_weight)
    # Location-major, whichever kernel ran (the fake kernel's layout).
    out = out.contiguous()
    return dist.view(*lead, N), out.view(*lead, *out.shape[1:])


@_routing_op.register_fake
def _routing_fake(X_p, X_q, h1, h2, row, col, beta, pose_weight, eps,
                  outer_iters, inner_iters, regularizer, routing, backend,
                  distance_only):
    lead, d = X_p.shape[:-2], X_p.shape[-1]
    N, V_q, _ = X_q.shape
    if distance_only:
        shape = (0, )
    else:
        shape = (V_q, d) if pose_weight is None else (pose_weight.shape[-1], )
    return (X_p.new_empty(*lead, N), X_p.new_empty(*lead, N, *shape))


@torch.library.custom_op('mmhgw::hgw_routing_backward', mutates_args=())
def _routing_backward_op(
    grad_dist: Tensor, grad_parts: Tensor, X_p: Tensor, X_q: Tensor,
    h1: Tensor, h2: Tensor, row: Tensor, col: Tensor, beta: Tensor, eps: float,
    outer_iters: int, inner_iters: int, regularizer: str, routing: str,
    backend: str, want_parts: bool
) -> Tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:
    """The envelope gradient ``(dX_p, dX_q, dh1, dh2, drow, dcol, dbeta,
    parts)`` of :func:`_routing_op` for upstream gradients ``grad_dist``
    [..., N] and ``grad_parts`` [..., N, V_q, d] (empty: the parts received
    none, and their gradient is skipped), each in its input's shape;
    ``parts`` are those at the plans solved again (empty unless
    ``want_parts``)."""
    inputs = (X_p, X_q, h1, h2, row, col, beta)
    N, V_q, d = X_q.shape
    if X_p.numel() == 0:
        grads = [torch.zeros_like(t) for t in inputs]
        parts = X_p.new_zeros(*X_p.shape[:-2], N, V_q, d)
    else:
        flat = _kernel_layout(X_p, X_q, h1, h2, row, col)
        M = flat[0].shape[0]
        kernels = KERNELS[resolve_backend(backend, X_p.device)]
        if grad_parts.numel():
            grad_parts = grad_parts.reshape(M, N, V_q, d).contiguous()
        grads, parts = kernels.backward(
            grad_dist.reshape(M, N).contiguous(), grad_parts, *flat, beta,
            _options(eps, outer_iters, inner_iters, regularizer, routing),
            want_parts)
        grads = [g.reshape(t.shape) for g, t in zip(grads, inputs)]
    if want_parts:
        parts = parts.view(*X_p.shape[:-2], N, V_q, d)
    else:
        parts = X_p.new_empty(0)
    return tuple(grads) + (parts, )


@_routing_backward_op.register_fake
def _routing_backward_fake(grad_dist, grad_parts, X_p, X_q, h1, h2, row, col,
                           beta, eps, outer_iters, inner_iters, regularizer,
                           routing, backend, want_parts):
    grads = tuple(
        torch.empty_like(t) for t in (X_p, X_q, h1, h2, row, col, beta))
    N, V_q, d = X_q.shape
    parts = (X_p.new_empty(*X_p.shape[:-2], N, V_q, d)
             if want_parts else X_p.new_empty(0))
    return grads + (parts, )


def hgw_routing_decomposition(X_p, X_q, h1, h2, row, col, beta, pose_weight,
                              eps, outer_iters, inner_iters, regularizer,
                              routing, backend, distance_only):
    """``mmhgw::hgw_routing`` in standard ATen operations (same arguments
    and outputs): :func:`hgw_routing_reference` on all locations at once,
    then the pose map. For graph exports that cannot hold the custom op
    (ONNX), e.g. ``ExportedProgram.run_decompositions({op: this})``; it
    materialises the plans, [..., N, V_p, V_q]."""
    lead, N = X_p.shape[:-2], X_q.shape[0]
    dist, parts = hgw_routing_reference(
        *_kernel_layout(X_p, X_q, h1, h2, row,
                        col), beta, eps=eps, outer_iters=outer_iters,
        inner_iters=inner_iters, regularizer=regularizer, routing=routing,
        chunk_entries=None, distance_only=distance_only)
    if distance_only:
        out = dist.new_zeros(*dist.shape, 0)
    else:
        out = parts if pose_weight is None else pose_map(parts, pose_weight)
    return dist.reshape(*lead, N), out.reshape(*lead, *out.shape[1:])


def _setup_context(ctx, inputs, output):
    ctx.save_for_backward(*inputs[:8])
    ctx.options = inputs[8:14]
    ctx.distance_only = inputs[14]


def _backward(ctx, grad_dist, grad_out):
    """Upstream gradients as the kernels read them (zeros for a distance
    that received none; for parts or poses that received none, or were not
    formed, an empty tensor, and the kernels skip their gradient; poses'
    through the pose map), the kernels' envelope gradient, and the pose
    map's gradient from the parts at the plans solved again (the forward
    kept none)."""
    X_p, X_q, h1, h2, row, col, beta, pose_weight = ctx.saved_tensors
    lead = X_p.shape[:-2]
    N, V_q, d = X_q.shape
    if grad_dist is None:
        grad_dist = X_p.new_zeros(*lead, N)
    if ctx.distance_only or grad_out is None:
        grad_out = None
        grad_parts = X_p.new_empty(0)
    elif pose_weight is None:
        grad_parts = grad_out
    else:
        grad_parts = torch.einsum('...no,nko->...nk', grad_out,
                                  pose_weight).reshape(*lead, N, V_q, d)
    want_parts = (pose_weight is not None and grad_out is not None
                  and ctx.needs_input_grad[7])
    *grads, parts = torch.ops.mmhgw.hgw_routing_backward(
        grad_dist, grad_parts, X_p, X_q, h1, h2, row, col, beta, *ctx.options,
        want_parts)
    grad_pose_weight = None
    if want_parts:
        grad_pose_weight = torch.einsum('...nk,...no->nko', parts.flatten(-2),
                                        grad_out)
    return (*grads, grad_pose_weight) + (None, ) * (len(ctx.options) + 1)


_routing_op.register_autograd(_backward, setup_context=_setup_context)


def _no_double_backward(ctx, *grads):
    raise RuntimeError(
        f'{OP_NAME} is once differentiable: its backward (the envelope '
        f'gradient at the plans solved again) has no gradient of its own, '
        f'so second-order gradients (double backward, gradient penalties) '
        f'through the HGW routing are not supported')


torch.library.register_autograd('mmhgw::hgw_routing_backward',
                                _no_double_backward,
                                setup_context=lambda ctx, inputs, output: None)


def resolve_backend(backend: str, device: torch.device) -> str:
    """The backend that runs for ``backend`` on ``device``.

    ``'auto'``: Triton on CUDA devices (when importable), the C++ kernels on
    the CPU (when built), else the torch reference, with one warning saying
    why. An explicitly requested backend that cannot run raises.
    """
    global _warned_fallback
    check_choice('backend', backend, BACKENDS)
    if backend == 'auto':
        if device.type == 'cuda':
            if triton_available():
                return 'triton'
            reason = 'Triton is not importable'
        elif device.type == 'cpu':
            if cpp_available():
                return 'cpp'
            reason = (f'the C++ extension mmhgw._ext is not built '
                      f'({_ext_error}); run `pip install -e .` in the '
                      f'mmhgw checkout with a C++ compiler')
        else:
            reason = f'no fused kernel for {device.type} devices'
        if not _warned_fallback:
            _warned_fallback = True
            warnings.warn(f'HGW routing falls back to the torch reference, '
                          f'several times slower: {reason}')
        return 'torch'
    if backend == 'cpp':
        if device.type != 'cpu':
            raise ValueError(f"backend='cpp' runs on the CPU, got tensors on "
                             f'{device}')
        if not cpp_available():
            raise RuntimeError(f"backend='cpp': the C++ extension "
                               f'mmhgw._ext is not built ({_ext_error})')
    if backend == 'triton':
        if not triton_available():
            raise RuntimeError(
                "backend='triton' needs Triton and a CUDA device (or "
                'TRITON_INTERPRET=1 to run it on the CPU)')
        if device.type != 'cuda' and os.environ.get('TRITON_INTERPRET') != '1':
            raise ValueError(f"backend='triton' runs on CUDA devices (or "
                             f'under TRITON_INTERPRET=1), got {device}')
    return backend


def hgw_routing(
        X_p: Tensor, X_q: Tensor, *args, eps: float = 1e-3, outer_iters: int,
        inner_iters: int, regularizer: str = 'proximal', routing: str = 'hgw',
        backend: str = 'auto', pose_weight: Optional[Tensor] = None,
        distance_only: bool = False) -> Tuple[Tensor, Optional[Tensor]]:
    """HGW distances and barycentric parts of every (location, type) pair:
    ``hgw_routing(X_p, X_q, factors, beta, *, ...)``, or with the factors in
    the kernels' flat order ``hgw_routing(X_p, X_q, h1, h2, row, col, beta,
    *, ...)``.

    Runs the custom op ``mmhgw::hgw_routing`` (one node under
    ``torch.compile``, ``torch.export`` and ``torch.jit.trace``).

    Args:
        X_p: [..., V_p, d] components, one set per location.
        X_q: [N, V_q, d] subcapsules, one per output type.
        factors: :class:`mmhgw.ot.GWFactors` of ``C_p`` and ``C_q``
            (:func:`mmhgw.ot.gw_factors`): ``row`` [..., V_p] and ``h1``
            [..., V_p, V_p] per location, ``col`` [N, V_q] and ``h2``
            [N, V_q, V_q] per output type.
        beta: weight of the cross cost (Eq. 21), a number or a one-element
            tensor (kept a tensor: no host synchronisation).
        eps, outer_iters, inner_iters, regularizer: the solver (see
            :func:`mmhgw.ot.hgw_distance`; ``eps >= mmhgw.ot.MIN_EPS``).
        routing: ``'hgw'``, or ``'uniform'`` (plan ``p q^T``).
        backend: ``'auto'``, ``'torch'``, ``'cpp'`` or ``'triton'``
            (resolved where the op runs, see :func:`resolve_backend`).
        pose_weight: optional [N, V_q * d, O], a linear map per type: the
            op then returns the poses (:func:`pose_map`) [..., N, O] instead
            of the parts, and keeps no parts for backward (it gets them from
            the plans it solves there).
        distance_only: return the distances alone, ``(distance, None)``:
            the kernels form neither parts nor poses, and backward has no
            parts' gradient to run (``pose_weight`` is then ignored).

    Numerics: float32 and float64 run as given; 16-bit inputs are solved in
    float32 (a 16-bit log-kernel loses the plan at small eps) and the
    outputs cast back. A problem (m, n) with a NaN or infinite input gets
    NaN outputs and gradients on every backend
    (:func:`~.hgw_routing_reference.poisoned_problems`); large finite
    embeddings give finite outputs
    (:func:`~.hgw_routing_reference.cross_cost`). The op is once
    differentiable: double backward raises.

    Returns:
        ``(distance [..., N], parts [..., N, V_q, d])``, or
        ``(distance, poses [..., N, O])`` with ``pose_weight``, or
        ``(distance, None)`` with ``distance_only``.
    """
    factors, beta = factor_args(args)
    check_choice('backend', backend, BACKENDS)
    check_routing_args(X_p, X_q, factors, beta, pose_weight, routing=routing,
                       eps=eps, outer_iters=outer_iters,
                       inner_iters=inner_iters, regularizer=regularizer)
    out_dtype = X_p.dtype
    dtype = torch.promote_types(out_dtype, torch.float32)
    if not torch.is_tensor(beta):
        beta = torch.tensor(float(beta))
    beta = beta.reshape(()).to(device=X_p.device, dtype=dtype)
    inputs = tuple(
        t.to(dtype)
        for t in (X_p, X_q, factors.h1, factors.h2, factors.row, factors.col))
    if distance_only:
        pose_weight = None
    elif pose_weight is not None:
        pose_weight = pose_weight.to(dtype)
    dist, out = torch.ops.mmhgw.hgw_routing(*inputs, beta, pose_weight,
                                            float(eps), outer_iters,
                                            inner_iters, regularizer, routing,
                                            backend, bool(distance_only))
    return dist.to(out_dtype), None if distance_only else out.to(out_dtype)
