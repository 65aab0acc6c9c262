"""FLOP counting for models with HGW capsules, on mmengine's FlopAnalyzer.

mmengine counts only the ops it has handles for (convolutions, matrix
products, norms, upsampling) and warns about the rest. Most of the HGW
solver's work is elementwise (``exp``, ``log``, scalings, clamps) and
reductions (the Sinkhorn sums and log-sum-exps), which that count leaves
out. The handles here add them, under one rule for every model, so a stock
ResNet and an HGWCaps-ResNet are counted alike:

- products (conv, matmul, einsum, linear): multiply-adds, as mmengine
  (one fused multiply-add = one FLOP);
- elementwise ops: one FLOP per output element (``exp`` and ``log``
  included: a transcendental counts as one, like an add);
- reductions: one FLOP per input element;
- views, copies and tensor factories: zero.

``einsum`` and ``matmul`` get broadcast-aware handles: the solver's
products broadcast one operand over subcapsules or locations, and
mmengine's ``matmul`` handle counts only the first operand's batch; its
``einsum`` handle also allocates (lazily) arrays of the operand shapes.

The routing op ``mmhgw::hgw_routing`` is one node of a traced graph; its
handle (:func:`hgw_routing_flops`) counts the operations of its
specification, :func:`mmhgw.ops.hgw_routing_reference`, by the rules above,
per operator kind. Importing mmhgw registers that handle with mmengine's
analyzers (:func:`register_with_mmengine`), so the upstream tools (mmdet's
and mmseg's ``get_flops``, ``get_model_complexity_info``) count the op too.
"""
import functools
import math
from collections import Counter
from typing import Any, Dict, List, NamedTuple, Optional, Sequence, Tuple

import torch
import torch.nn as nn
from mmengine.analysis import FlopAnalyzer
from mmengine.analysis.jit_handles import einsum_flop_jit, get_shape

ELEMENTWISE_OPS = tuple(
    f'aten::{name}{suffix}'
    for name in ('add', 'sub', 'rsub', 'mul', 'div', 'neg', 'exp', 'expm1',
                 'log', 'log1p', 'sqrt', 'rsqrt', 'reciprocal', 'pow', 'clamp',
                 'clamp_min', 'clamp_max', 'relu', 'sigmoid', 'tanh', 'abs',
                 'square', 'maximum', 'minimum', 'where', 'softplus', 'gelu',
                 'silu', 'hardtanh', 'leaky_relu', 'sign', 'log2', 'exp2',
                 'floor') for suffix in ('', '_'))

REDUCTION_OPS = tuple(f'aten::{name}'
                      for name in ('sum', 'mean', 'amax', 'amin', 'max', 'min',
                                   'logsumexp', 'softmax', 'log_softmax',
                                   'norm', 'linalg_vector_norm', 'var', 'std',
                                   'prod', 'all', 'any'))

#: Ops that move or create data without arithmetic: counted as zero so that
#: the unsupported-op warnings name only ops that may matter.
ZERO_COST_OPS = tuple(
    f'aten::{name}'
    for name in ('ones_like', 'zeros_like', 'full_like', 'empty_like',
                 'broadcast_tensors', 'numpy_T', 'expand_as', 'unbind',
                 'split', 'split_with_sizes', 'type_as', 'to', 'clone',
                 'unsqueeze', 'squeeze', 'view', 'reshape', 'transpose',
                 'permute', 'contiguous', 'narrow', 'slice', 'select',
                 'lift_fresh', 'new_ones', 'new_zeros', 'zeros', 'ones',
                 'stack', 'cat', 'repeat', 'eye', 'bitwise_not', 'logical_not',
                 'ne', 'lt', 'le', 'gt', 'ge', 'eq', 'masked_fill', 'index',
                 'gather', 'topk', 'sort', 'argmax', 'nonzero', 'detach',
                 'alias', 'resolve_conj', 'resolve_neg', 'isfinite', 'isnan',
                 'isinf', '__or__', '__and__', 'bitwise_or', 'bitwise_and',
                 'logical_or', 'logical_and', 'pad', 'constant_pad_nd'))

#: Op kinds, as FlopAnalyzer names them in ``by_operator``, whose count is
#: multiply-adds of a product.
PRODUCT_OPERATORS = ('conv', 'matmul', 'mm', 'bmm', 'addmm', 'einsum',
                     'linear')


def _numel(shape) -> int:
    return math.prod(shape) if shape else 1


def elementwise_flops(inputs: List[Any], outputs: List[Any]) -> int:
    """One FLOP per element of the (first) output."""
    return _numel(get_shape(outputs[0]))


def reduction_flops(inputs: List[Any], outputs: List[Any]) -> int:
    """One FLOP per element of the reduced (first) input."""
    return _numel(get_shape(inputs[0]))


def zero_flops(inputs: List[Any], outputs: List[Any]) -> int:
    return 0


def _broadcast(*shapes: Sequence[int]) -> List[int]:
    size = max((len(s) for s in shapes), default=0)
    padded = [[1] * (size - len(s)) + list(s) for s in shapes]
    return [max(dims) for dims in zip(*padded)]


def matmul_flops(inputs: List[Any], outputs: List[Any]) -> int:
    """Multiply-adds of ``a @ b`` [..., n, k] x [..., k, m] with broadcast
    batch dims (1-d operands promoted as torch does)."""
    a, b = (list(get_shape(v)) for v in inputs[:2])
    a = [1] + a if len(a) == 1 else a
    b = b + [1] if len(b) == 1 else b
    if a[-1] != b[-2]:
        raise ValueError(f'matmul shapes do not match: {a} @ {b}')
    return _numel(_broadcast(a[:-2], b[:-2])) * a[-2] * a[-1] * b[-1]


def einsum_flops(inputs: List[Any], outputs: List[Any]) -> float:
    """Multiply-adds of a two-operand ``einsum``: the product of the sizes
    of all its indices (ellipsis dims broadcast). Three or more operands go
    to mmengine's handle (contraction order by numpy's optimiser)."""
    equation = inputs[0].toIValue().replace(' ', '')
    operands = list(inputs[1].node().inputs())
    if len(operands) != 2:
        return einsum_flop_jit(inputs, outputs)
    sizes, ellipses = {}, []
    for subscripts, value in zip(equation.split('->')[0].split(','), operands):
        shape = list(get_shape(value))
        head, _, tail = subscripts.partition('...')
        if '...' in subscripts:
            n = len(shape) - len(head) - len(tail)
            ellipses.append(shape[len(head):len(head) + n])
            shape = shape[:len(head)] + shape[len(head) + n:]
        for letter, size in zip(head + tail, shape):
            sizes[letter] = max(sizes.get(letter, 1), size)
    return _numel(list(sizes.values())) * _numel(_broadcast(*ellipses))


#: The routing op's name in traced graphs.
ROUTING_OP = 'mmhgw::hgw_routing'


def hgw_op_handles() -> Dict[str, Any]:
    """Handles to pass to ``FlopAnalyzer.set_op_handle``."""
    handles = {op: elementwise_flops for op in ELEMENTWISE_OPS}
    handles.update({op: reduction_flops for op in REDUCTION_OPS})
    handles.update({op: zero_flops for op in ZERO_COST_OPS})
    handles.update({
        'aten::einsum': einsum_flops, 'aten::matmul': matmul_flops,
        'aten::mm': matmul_flops, ROUTING_OP: hgw_routing_flops
    })
    return handles


class _Specification(nn.Module):
    """The routing op's composition in plain torch: the reference on all
    locations at once, then the pose map; or the distances alone."""

    def __init__(self, options: dict, with_pose_map: bool,
                 distance_only: bool):
        super().__init__()
        self.options = options
        self.with_pose_map = with_pose_map
        self.distance_only = distance_only

    def forward(self, *inputs):
        from mmhgw.ops import hgw_routing_reference, pose_map
        dist, parts = hgw_routing_reference(*inputs[:7], chunk_entries=None,
                                            distance_only=self.distance_only,
                                            **self.options)
        if self.distance_only:
            return dist
        return dist, (pose_map(parts, inputs[7])
                      if self.with_pose_map else parts)


@functools.lru_cache(maxsize=None)
def _bilinear_counts(V_p: int, V_q: int, d: int, O: Optional[int],
                     options: Tuple,
                     distance_only: bool) -> Dict[str, Tuple[float, ...]]:
    """Per operator kind, ``(c, c_M, c_N, c_MN)`` with the count of the
    specification on M locations and N types ``c + c_M M + c_N N +
    c_MN M N``: every operation of it is per problem, per location, per
    type or once, so four traces at M, N in {1, 2} give it exactly."""
    corners = {}
    for M, N in ((1, 1), (2, 1), (1, 2), (2, 2)):
        inputs = [
            torch.ones(M, V_p, d),
            torch.ones(N, V_q, d),
            torch.ones(M, V_p, V_p),
            torch.ones(N, V_q, V_q),
            torch.ones(M, V_p),
            torch.ones(N, V_q),
            torch.tensor(0.5),
            torch.ones(N, V_q * d, O or 1)
        ]
        analyzer = FlopAnalyzer(
            _Specification(dict(options), O is not None, distance_only),
            tuple(inputs))
        analyzer.set_op_handle(
            **{k: v
               for k, v in hgw_op_handles().items() if k != ROUTING_OP})
        analyzer.unsupported_ops_warnings(False)
        analyzer.uncalled_modules_warnings(False)
        with torch.no_grad():
            corners[M, N] = analyzer.by_operator()
    counts = {}
    for kind in set().union(*corners.values()):
        c11, c21, c12, c22 = (corners[k].get(kind, 0)
                              for k in ((1, 1), (2, 1), (1, 2), (2, 2)))
        c_MN = c22 - c21 - c12 + c11
        c_M, c_N = c21 - c11 - c_MN, c12 - c11 - c_MN
        counts[kind] = (c11 - c_M - c_N - c_MN, c_M, c_N, c_MN)
    return counts


def hgw_routing_flops(inputs: List[Any], outputs: List[Any]) -> Counter:
    """FLOPs of one ``mmhgw::hgw_routing`` node, per operator kind: those
    of :func:`mmhgw.ops.hgw_routing_reference` (and the pose map; neither
    parts nor poses for a distance-only node) at the node's shapes and
    options, by this module's rules. The fused kernels perform the same
    operations without the reference's temporaries."""
    X_p, X_q = get_shape(inputs[0]), get_shape(inputs[1])
    pose = inputs[7]
    O = None if pose.type().kind() == 'NoneType' else get_shape(pose)[2]
    eps, outer, inner, regularizer, routing = (v.toIValue()
                                               for v in inputs[8:13])
    options = (('eps', eps), ('outer_iters', outer), ('inner_iters', inner),
               ('regularizer', regularizer), ('routing', routing))
    distance_only = bool(inputs[14].toIValue())
    M, N = _numel(X_p[:-2]), X_q[0]
    counts = _bilinear_counts(X_p[-2], X_q[1], X_p[-1], O, options,
                              distance_only)
    return Counter({
        kind: c + c_M * M + c_N * N + c_MN * M * N
        for kind, (c, c_M, c_N, c_MN) in counts.items()
    })


def register_with_mmengine() -> None:
    """Add the routing op's handle to the defaults of mmengine's
    FlopAnalyzer and ActivationAnalyzer (its activations: the output
    elements), so that tools that build their own analyzers count it
    (mmengine keeps these defaults in module-level tables)."""
    from mmengine.analysis import complexity_analysis
    from mmengine.analysis.jit_handles import generic_activation_jit
    complexity_analysis._DEFAULT_SUPPORTED_FLOP_OPS.setdefault(
        ROUTING_OP, hgw_routing_flops)
    complexity_analysis._DEFAULT_SUPPORTED_ACT_OPS.setdefault(
        ROUTING_OP, generic_activation_jit())


def flop_analyzer(model: nn.Module, inputs) -> FlopAnalyzer:
    """mmengine's FlopAnalyzer on ``model(*inputs)`` with
    :func:`hgw_op_handles` added."""
    analyzer = FlopAnalyzer(model, inputs)
    analyzer.set_op_handle(**hgw_op_handles())
    return analyzer


class FlopReport(NamedTuple):
    """Counts of one traced forward.

    ``total``: all FLOPs; ``products``: multiply-adds of conv / matmul /
    einsum / linear; ``elementwise``: the rest (elementwise, reductions,
    norms, upsampling); ``hgw``: FLOPs inside HGW capsule layers (0 for a
    model without them); ``by_operator``: per op kind; ``unsupported``:
    op kinds that were not counted, with their occurrences.
    """
    total: float
    products: float
    elementwise: float
    hgw: float
    by_operator: Dict[str, float]
    unsupported: Dict[str, int]


def count_flops(model: nn.Module, inputs) -> FlopReport:
    """Count the FLOPs of ``model(*inputs)`` (see the module docstring).

    Args:
        model: in the mode to count (``eval()`` for inference).
        inputs: tuple of positional inputs, as for ``torch.jit.trace``.
    """
    return flop_report(flop_analyzer(model, inputs), model)


def flop_report(analyzer: FlopAnalyzer, model: nn.Module) -> FlopReport:
    """:class:`FlopReport` of an analyzer made by :func:`flop_analyzer`
    (traces ``model`` on first use)."""
    analyzer.unsupported_ops_warnings(False)
    analyzer.uncalled_modules_warnings(False)
    # Inference FLOPs: no autograd bookkeeping (nor recomputation) traced.
    with torch.no_grad():
        by_operator = Counter(analyzer.by_operator())
    total = float(analyzer.total())
    products = float(
        sum(v for k, v in by_operator.items() if k in PRODUCT_OPERATORS))
    by_module = analyzer.by_module()
    hgw = float(
        sum(
            by_module.get(name, 0) for name, module in model.named_modules()
            if type(module).__name__ == 'HGWCaps'))
    return FlopReport(total, products, total - products, hgw,
                      dict(by_operator), dict(analyzer.unsupported_ops()))
