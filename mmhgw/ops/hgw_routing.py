"""HGW routing as one op: from embeddings and structure factors to the HGW
distance and the barycentric parts of every (location, output type) pair.

Per location ``m`` and output type ``n`` the op solves the HGW problem of
paper Eq. 21 between the components ``X_p[m]`` [V_p, d] and the subcapsule
``X_q[n]`` [V_q, d] by the proximal-point method (Eq. 25 / 25a, Algorithm 1),
and returns

- ``distance[m, n] = <L(C_p, C_q) (x) T + beta K, T>`` (Eq. 21, 24), and
- ``parts[m, n] = V_q T^T X_p[m]`` [V_q, d], the barycentric projection of
  the components onto the subcapsule's parts through the plan ``T``, or,
  given a pose map ``W`` [N, V_q d, O], the poses ``vec(parts[m, n]) W[n]``
  [O] (the capsule layer's; then the parts are not kept for backward).

The structures enter through the factors of Peyre's decomposition
(:func:`mmhgw.ot.gw_factors`): ``L (x) T = row 1^T + 1 col^T - h1 T h2^T``,
with ``h1`` [M, V_p, V_p] and ``row`` [M, V_p] per location and ``h2``
[N, V_q, V_q] and ``col`` [N, V_q] per output type. The cross cost
``K = 1 - exp(-|x_i - y_j|^2 / d)`` is computed inside.

Backends: ``'torch'`` (:func:`hgw_routing_reference`, the specification),
``'cpp'`` (``mmhgw._ext``, built by ``pip install -e .``) and ``'triton'``
(CUDA, or the Triton interpreter). The fused backends hold each problem in
registers or a small workspace and write nothing of size
``M x N x V_p x V_q``. Every backend owns its backward, the envelope
gradient (exact at a converged plan): the plan is solved again in backward
and held fixed, so nothing plan-sized is kept between forward and backward.
"""
import math
import os
import warnings
from typing import Optional, Tuple, Union

import torch
from torch import Tensor

from mmhgw.ot.hgw import (CPU_CHUNK_ENTRIES, GWTerms, REGULARIZERS,
                          bound_distance, hgw_value, plan_from_terms)

BACKENDS = ('auto', 'torch', 'cpp', 'triton')
ROUTINGS = ('hgw', 'uniform')

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


def cross_cost(X_p: Tensor, X_q: Tensor) -> Tensor:
    """``K[m, n] = 1 - exp(-|X_p[m, i] - X_q[n, j]|^2 / d)`` [M, N, V_p, V_q]
    (:func:`mmhgw.ot.bound_distance` with floor 0: the cross cost is never
    logged), by one matrix product."""
    M, V_p, d = X_p.shape
    N, V_q, _ = X_q.shape
    dot = (X_p.reshape(-1, d) @ X_q.reshape(-1, d).T).view(
        M, V_p, N, V_q).transpose(1, 2)
    sq = (X_p.pow(2).sum(-1).view(M, 1, V_p, 1) +
          X_q.pow(2).sum(-1).view(1, N, 1, V_q) - 2 * dot)
    return bound_distance(sq, d, floor=0.0)


def hgw_routing_reference(X_p: Tensor, X_q: Tensor, h1: Tensor, h2: Tensor,
                          row: Tensor, col: Tensor, beta: Union[float,
                                                                Tensor], *,
                          eps: float, outer_iters: int, inner_iters: int,
                          regularizer: str = 'proximal',
                          routing: str = 'hgw') -> Tuple[Tensor, Tensor]:
    """The specification of the op in plain torch (flattened shapes).

    The plan comes from :func:`mmhgw.ot.plan_from_terms` without autograd;
    the distance (Eq. 21) and the parts are then differentiable functions
    of the inputs at that fixed plan, so autograd through this function is
    the envelope gradient. Materialises [M, N, V_p, V_q] tensors: use it
    on few locations, or through :func:`hgw_routing`.

    Args:
        X_p: [M, V_p, d] components. X_q: [N, V_q, d] subcapsules.
        h1: [M, V_p, V_p]. h2: [N, V_q, V_q]. row: [M, V_p]. col: [N, V_q]
            (see :func:`mmhgw.ot.gw_factors`).
        beta: weight of the cross cost (float or 0-dim tensor).
        eps, outer_iters, inner_iters, regularizer: as
            :func:`mmhgw.ot.hgw_distance`.
        routing: ``'hgw'``, or ``'uniform'`` (plan ``p q^T``, no solve).

    Returns:
        ``(distance [M, N], parts [M, N, V_q, d])``.
    """
    V_p, V_q = X_p.shape[1], X_q.shape[1]
    K = cross_cost(X_p, X_q)
    terms = GWTerms(row[:, None, :, None] + col[None, :, None, :],
                    h1.unsqueeze(1), h2.transpose(-1, -2))
    if routing == 'hgw':
        p = K.new_full((V_p, ), 1.0 / V_p)
        q = K.new_full((V_q, ), 1.0 / V_q)
        with torch.no_grad():
            T = plan_from_terms(
                GWTerms(*(t.detach() for t in terms)), K.detach(),
                beta.detach() if torch.is_tensor(beta) else beta, p, q,
                eps=eps, outer_iters=outer_iters, inner_iters=inner_iters,
                regularizer=regularizer)
    else:
        T = K.new_full((1, ), 1.0 / (V_p * V_q)).expand(K.shape)
    distance = hgw_value(terms, K, T, beta)
    # Columns of the plan sum to 1 / V_q, hence the factor V_q.
    parts = V_q * torch.einsum('mnpq,mpd->mnqd', T, X_p)
    return distance, parts


def _location_chunks(M: int, N: int, V_p: int, V_q: int):
    """Slices of locations holding about :data:`CPU_CHUNK_ENTRIES` plan
    entries each: bounds the reference's temporaries (and keeps them in
    cache on the CPU)."""
    length = max(1, CPU_CHUNK_ENTRIES // max(1, N * V_p * V_q))
    for start in range(0, M, length):
        yield slice(start, min(M, start + length))


class _TorchKernels:
    """:func:`hgw_routing_reference` in chunks of locations; in backward it
    solves again and differentiates the reference at the fixed plan."""

    @staticmethod
    def forward(X_p, X_q, h1, h2, row, col, beta, options):
        N, V_q, d = X_q.shape
        dist = X_p.new_empty(X_p.shape[0], N)
        parts = X_p.new_empty(X_p.shape[0], N, V_q, d)
        for s in _location_chunks(X_p.shape[0], N, X_p.shape[1], V_q):
            dist[s], parts[s] = hgw_routing_reference(
                X_p[s], X_q, h1[s], h2, row[s], col, beta, **options)
        return dist, parts

    @staticmethod
    def backward(grad_dist, grad_parts, X_p, X_q, h1, h2, row, col, beta,
                 options, want_parts):
        grads = [torch.zeros_like(t) for t in (X_p, X_q, h1, h2, row, col,
                                               beta)]
        N, V_q, _ = X_q.shape
        parts = (X_p.new_empty(X_p.shape[0], N, V_q, X_q.shape[2])
                 if want_parts else None)
        for s in _location_chunks(X_p.shape[0], N, X_p.shape[1], V_q):
            with torch.enable_grad():
                inputs = [t.detach().requires_grad_() for t in (
                    X_p[s], X_q, h1[s], h2, row[s], col, beta)]
                dist, chunk_parts = hgw_routing_reference(*inputs, **options)
                chunk = torch.autograd.grad(
                    (dist, chunk_parts), inputs, (grad_dist[s], grad_parts[s]),
                    allow_unused=True)
            if want_parts:
                parts[s] = chunk_parts.detach()
            for i, g in enumerate(chunk):
                if g is None:
                    continue
                if i in (0, 2, 4):  # per-location inputs
                    grads[i][s] += g
                else:
                    grads[i] += g
        return grads, parts


def _kernel_args(options):
    return (float(options['eps']), int(options['outer_iters']),
            int(options['inner_iters']),
            options['regularizer'] == 'proximal',
            options['routing'] == 'uniform')


class _CppKernels:
    """The C++ kernels of ``mmhgw/ops/csrc/hgw_routing_cpu.cpp``."""

    @staticmethod
    def forward(X_p, X_q, h1, h2, row, col, beta, options):
        return tuple(_ext.hgw_routing_forward(X_p, X_q, h1, h2, row, col,
                                              float(beta),
                                              *_kernel_args(options)))

    @staticmethod
    def backward(grad_dist, grad_parts, X_p, X_q, h1, h2, row, col, beta,
                 options, want_parts):
        out = _ext.hgw_routing_backward(grad_dist, grad_parts, X_p, X_q, h1,
                                        h2, row, col, float(beta),
                                        *_kernel_args(options), want_parts)
        grads = (*out[:6], out[6].to(beta.dtype).view_as(beta))
        return grads, out[7] if want_parts else None


class _TritonKernels:
    """The Triton kernels of :mod:`mmhgw.ops.hgw_routing_triton`."""

    @staticmethod
    def forward(X_p, X_q, h1, h2, row, col, beta, options):
        from . import hgw_routing_triton
        return hgw_routing_triton.forward(X_p, X_q, h1, h2, row, col, beta,
                                          *_kernel_args(options))

    @staticmethod
    def backward(grad_dist, grad_parts, X_p, X_q, h1, h2, row, col, beta,
                 options, want_parts):
        from . import hgw_routing_triton
        return hgw_routing_triton.backward(grad_dist, grad_parts, X_p, X_q,
                                           h1, h2, row, col, beta,
                                           *_kernel_args(options), want_parts)


KERNELS = dict(torch=_TorchKernels, cpp=_CppKernels, triton=_TritonKernels)


def _poses(parts: Tensor, pose_weight: Tensor) -> Tensor:
    """``parts.flatten(-2) @ pose_weight[n]`` per type n: [M, N, O]."""
    return torch.einsum('mnk,nko->mno', parts.flatten(-2), pose_weight)


def _kernel_layout(X_p, X_q, h1, h2, row, col):
    """The kernels' layout: locations flattened ([M, V_p, d], [M, V_p,
    V_p], [M, V_p]), every tensor contiguous."""
    V_p, d = X_p.shape[-2:]
    return (X_p.reshape(-1, V_p, d).contiguous(), X_q.contiguous(),
            h1.reshape(-1, V_p, V_p).contiguous(), h2.contiguous(),
            row.reshape(-1, V_p).contiguous(), col.contiguous())


class _Routing(torch.autograd.Function):
    """The op on one backend's kernels. Forward keeps only the inputs;
    backward solves the plans again and takes the envelope gradient there,
    so nothing plan-sized lives between the two. With a pose map the parts
    are mapped at once and dropped: backward gets them back from the plans
    it solves anyway (they are 8x a 256-channel layer's output)."""

    @staticmethod
    def forward(ctx, X_p, X_q, h1, h2, row, col, beta, pose_weight, kernels,
                options):
        ctx.kernels, ctx.options = kernels, options
        # The caller's tensors are kept, not the kernels' flat copies: the
        # layer's components are a permuted view of its embedding, whose
        # storage autograd keeps anyway (a copy would be one more
        # layer-output-sized tensor per capsule layer).
        ctx.save_for_backward(X_p, X_q, h1, h2, row, col, beta, pose_weight)
        dist, parts = kernels.forward(*_kernel_layout(X_p, X_q, h1, h2, row,
                                                      col), beta, options)
        if pose_weight is None:
            return dist, parts
        return dist, _poses(parts, pose_weight)

    @staticmethod
    def backward(ctx, grad_dist, grad_out):
        saved = ctx.saved_tensors
        X_p, X_q, h1, h2, row, col = _kernel_layout(*saved[:6])
        beta, pose_weight = saved[6:]
        N, V_q, d = X_q.shape
        M = X_p.shape[0]
        # Upstream gradients as the kernels read them: contiguous, zeros for
        # an output that received none.
        grad_dist = (X_p.new_zeros(M, N) if grad_dist is None else
                     grad_dist.contiguous())
        if grad_out is None:
            grad_parts = X_p.new_zeros(M, N, V_q, d)
        elif pose_weight is None:
            grad_parts = grad_out.contiguous()
        else:
            grad_parts = torch.einsum('mno,nko->mnk', grad_out,
                                      pose_weight).reshape(
                                          M, N, V_q, d).contiguous()
        want_parts = (pose_weight is not None and grad_out is not None and
                      ctx.needs_input_grad[7])
        grads, parts = ctx.kernels.backward(grad_dist, grad_parts, X_p, X_q,
                                            h1, h2, row, col, beta,
                                            ctx.options, want_parts)
        grad_pose_weight = (torch.einsum('mnk,mno->nko', parts.flatten(-2),
                                         grad_out) if want_parts else None)
        grads = [g.reshape(t.shape) for g, t in zip(grads, saved)]
        return (*grads, grad_pose_weight, None, None)


def resolve_backend(backend: str, device: torch.device) -> str:
    """The backend that runs for ``backend`` on ``device``.

    ``'auto'``: Triton on CUDA devices (when importable), the C++ kernels on
    the CPU (when built), else the torch reference, with one warning saying
    why. An explicitly requested backend that cannot run raises.
    """
    global _warned_fallback
    if backend not in BACKENDS:
        raise ValueError(f'backend must be one of {BACKENDS}, got '
                         f'{backend!r}')
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


def _check(X_p, X_q, h1, h2, row, col, beta, eps, outer_iters, inner_iters,
           regularizer, routing, pose_weight):
    if routing not in ROUTINGS:
        raise ValueError(f'routing must be one of {ROUTINGS}, got '
                         f'{routing!r}')
    if regularizer not in REGULARIZERS:
        raise ValueError(f'regularizer must be one of {REGULARIZERS}, got '
                         f'{regularizer!r}')
    for name, value in (('outer_iters', outer_iters),
                        ('inner_iters', inner_iters)):
        if not isinstance(value, int) or value < 1:
            raise ValueError(f'{name} must be a positive int, got {value!r}')
    if not (isinstance(eps, (int, float)) and 0 < eps < math.inf):
        raise ValueError(f'eps must be a positive finite number, got {eps!r}')
    if X_p.dim() < 2 or X_q.dim() != 3:
        raise ValueError(f'X_p must be [..., V_p, d] and X_q [N, V_q, d], '
                         f'got {tuple(X_p.shape)} and {tuple(X_q.shape)}')
    lead, (V_p, d) = X_p.shape[:-2], X_p.shape[-2:]
    N, V_q, d_q = X_q.shape
    expected = dict(X_q=(N, V_q, d), h1=lead + (V_p, V_p), h2=(N, V_q, V_q),
                    row=lead + (V_p, ), col=(N, V_q))
    for name, t in (('X_q', X_q), ('h1', h1), ('h2', h2), ('row', row),
                    ('col', col)):
        if tuple(t.shape) != tuple(expected[name]):
            raise ValueError(f'{name} must have shape '
                             f'{tuple(expected[name])} for X_p of shape '
                             f'{tuple(X_p.shape)} and X_q of shape '
                             f'{tuple(X_q.shape)}, got {tuple(t.shape)}')
    if min(V_p, V_q, d) < 1:
        raise ValueError(f'V_p, V_q and d must be >= 1, got {V_p}, {V_q}, '
                         f'{d}')
    if torch.is_tensor(beta) and beta.numel() != 1:
        raise ValueError(f'beta must be a number or a one-element tensor, '
                         f'got shape {tuple(beta.shape)}')
    tensors = [X_p, X_q, h1, h2, row, col]
    if pose_weight is not None:
        if (pose_weight.dim() != 3
                or tuple(pose_weight.shape[:2]) != (N, V_q * d)
                or pose_weight.shape[2] < 1):
            raise ValueError(f'pose_weight must have shape (N, V_q * d, O) = '
                             f'({N}, {V_q * d}, O) for X_q of shape '
                             f'{tuple(X_q.shape)}, got '
                             f'{tuple(pose_weight.shape)}')
        tensors.append(pose_weight)
    devices = {t.device for t in tensors}
    if len(devices) > 1:
        raise ValueError(f'all inputs must be on one device, got {devices}')


def hgw_routing(X_p: Tensor, X_q: Tensor, h1: Tensor, h2: Tensor,
                row: Tensor, col: Tensor, beta: Union[float, Tensor], *,
                eps: float = 1e-3, outer_iters: int, inner_iters: int,
                regularizer: str = 'proximal', routing: str = 'hgw',
                backend: str = 'auto',
                pose_weight: Optional[Tensor] = None) -> Tuple[Tensor, Tensor]:
    """HGW distances and barycentric parts of every (location, type) pair.

    Args:
        X_p: [..., V_p, d] components, one set per location.
        X_q: [N, V_q, d] subcapsules, one per output type.
        h1: [..., V_p, V_p], row: [..., V_p] per location; h2: [N, V_q, V_q],
            col: [N, V_q] per output type: the factors of
            :func:`mmhgw.ot.gw_factors` for ``C_p`` and ``C_q``.
        beta: weight of the cross cost (Eq. 21).
        eps, outer_iters, inner_iters, regularizer: the solver (see
            :func:`mmhgw.ot.hgw_distance`).
        routing: ``'hgw'``, or ``'uniform'`` (plan ``p q^T``).
        backend: ``'auto'``, ``'torch'``, ``'cpp'`` or ``'triton'``.
        pose_weight: optional [N, V_q * d, O], a linear map per type: the
            op then returns the poses ``parts.flatten(-2) @ pose_weight[n]``
            [..., N, O] instead of the parts, and keeps no parts for
            backward (it gets them from the plans it solves there).

    Numerics: float32 and float64 run as given; 16-bit inputs are solved in
    float32 (at ``eps = 1e-3`` a 16-bit log-kernel loses the plan) and the
    outputs cast back.

    Returns:
        ``(distance [..., N], parts [..., N, V_q, d])``, or
        ``(distance, poses [..., N, O])`` with ``pose_weight``.
    """
    _check(X_p, X_q, h1, h2, row, col, beta, eps, outer_iters, inner_iters,
           regularizer, routing, pose_weight)
    lead, (V_p, d) = X_p.shape[:-2], X_p.shape[-2:]
    N, V_q, _ = X_q.shape
    out_dtype = X_p.dtype
    dtype = torch.promote_types(out_dtype, torch.float32)
    if not torch.is_tensor(beta):
        beta = torch.tensor(float(beta))
    beta = beta.reshape(()).to(device=X_p.device, dtype=dtype)
    inputs = tuple(t.to(dtype) for t in (X_p, X_q, h1, h2, row, col))
    if pose_weight is not None:
        pose_weight = pose_weight.to(dtype)
    options = dict(eps=float(eps), outer_iters=outer_iters,
                   inner_iters=inner_iters, regularizer=regularizer,
                   routing=routing)
    if torch.jit.is_tracing():
        # A traced graph (FLOP counting, export) records the reference's
        # operations: the kernels compute the same ones, and an autograd
        # Function would be an opaque node.
        dist, out = hgw_routing_reference(*_kernel_layout(*inputs), beta,
                                          **options)
        if pose_weight is not None:
            out = _poses(out, pose_weight)
    elif X_p.numel() == 0:
        dist = X_p.new_zeros(0, N, dtype=dtype) + 0 * beta
        out = X_p.new_zeros(0, N, V_q, d, dtype=dtype)
        if pose_weight is not None:
            out = _poses(out, pose_weight)
    else:
        kernels = KERNELS[resolve_backend(backend, X_p.device)]
        dist, out = _Routing.apply(*inputs, beta, pose_weight, kernels,
                                   options)
    shape = (V_q, d) if pose_weight is None else (pose_weight.shape[2], )
    return (dist.to(out_dtype).view(*lead, N),
            out.to(out_dtype).view(*lead, N, *shape))
