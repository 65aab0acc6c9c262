"""What TF32 tensor-core products would do to the routing, measured on the
CPU by emulating them in the torch reference.

The Triton kernels form every product of the routing with ``tl.dot``: the
embeddings' inner products of the cross cost, the GW product
``h1 T h2^T`` of every proximal step and of the value. This script runs
:func:`mmhgw.ops.hgw_routing_reference` in float32 with those products'
operands rounded as the tensor cores would take them, and compares the
outcome with the float64 reference at the same settings:

- ``ieee``: float32 products (the reference as it is);
- ``tf32x3``: each operand split into a TF32 head and a TF32 tail, three
  products summed (what the kernels use for float32 now);
- ``tf32``: one product of the operands rounded to TF32 (10 mantissa
  bits, to nearest);
- ``tf32 (truncated)``: the operands' low 13 bits dropped.

Sums (Sinkhorn's marginals, the squared norms) stay float32, as in the
kernels. Per input set, pooled over sampled locations and all output types:
the mean and largest relative error of the HGW distance, the largest error
of the layer's activation ``exp(-(d - min d) / T)`` at the shipped
temperature, the share of locations whose best-aligned output type is the
float64 one, and the share of plan rows whose largest entry is.

    python bench/bench_tf32.py [--checkpoint CKPT --config CFG --image IMG]
        [--locations 48] [--no-write]
"""
import contextlib
import importlib
from unittest import mock

import torch
from bench_convergence import input_parser, input_sets

from mmhgw.benchmarking import markdown_table, write_section
from mmhgw.ot import GWFactors

# The modules themselves (the packages export functions of the same names).
reference = importlib.import_module('mmhgw.ops.hgw_routing_reference')
gw_terms = importlib.import_module('mmhgw.ot.gw_terms')
sinkhorn = importlib.import_module('mmhgw.ot.sinkhorn')

#: The layer's activation temperature (HGWCaps' default).
TEMPERATURE = 0.1
#: (eps, proximal steps, Sinkhorn iterations): the layer's default, and the
#: paper's eps at converged counts (its errors in the cost are divided by a
#: ten times smaller eps).
SETTINGS = [(1e-2, 3, 10), (1e-3, 8, 50)]
MODES = ['ieee', 'tf32x3', 'tf32', 'tf32 (truncated)']


def to_tf32(x, truncate=False):
    """float32 ``x`` with the 13 low mantissa bits of TF32's 10-bit
    mantissa cleared: rounded to nearest (ties away, as ``cvt.rna``) or
    truncated."""
    bits = x.contiguous().view(torch.int32)
    if not truncate:
        bits = bits + 0x1000
    return (bits & ~0x1FFF).view(torch.float32)


def emulated(product, mode):
    """``product(a, b)`` with its operands as the tensor cores of ``mode``
    take them; accumulation in float32."""
    if mode == 'ieee':
        return product
    if mode == 'tf32x3':

        def split_product(a, b):
            a_hi, b_hi = to_tf32(a), to_tf32(b)
            a_lo, b_lo = to_tf32(a - a_hi), to_tf32(b - b_hi)
            return (product(a_hi, b_lo) + product(a_lo, b_hi) +
                    product(a_hi, b_hi))

        return split_product
    truncate = mode == 'tf32 (truncated)'
    return lambda a, b: product(to_tf32(a, truncate), to_tf32(b, truncate))


@contextlib.contextmanager
def products(mode):
    """Within: the reference's products (cross cost, GW products) in
    ``mode``. ``torch.einsum`` and ``Tensor.__matmul__`` are replaced only
    inside the functions that form them, so the Sinkhorn iterations' sums
    stay float32, as in the kernels."""
    einsum, matmul = torch.einsum, torch.Tensor.__matmul__

    def with_products(fn):

        def wrapped(*args, **kwargs):
            torch.einsum = lambda eq, a, b: emulated(
                lambda x, y: einsum(eq, x, y), mode)(a, b)
            torch.Tensor.__matmul__ = lambda a, b: emulated(matmul, mode)(a, b)
            try:
                return fn(*args, **kwargs)
            finally:
                torch.einsum, torch.Tensor.__matmul__ = einsum, matmul

        return wrapped

    with mock.patch.object(sinkhorn, 'gw_apply',
                           with_products(gw_terms.gw_apply)), \
            mock.patch.object(gw_terms, 'gw_apply',
                              with_products(gw_terms.gw_apply)), \
            mock.patch.object(reference, 'cross_cost',
                              with_products(reference.cross_cost)):
        yield


def route(inputs, setting, dtype, mode='ieee'):
    """Distances [M, N] and plans of the reference in ``dtype`` at
    ``setting`` (one of :data:`SETTINGS`)."""
    eps, outer, inner = setting
    X_p, X_q, h1, h2, row, col, beta = (t.to(dtype)
                                        if torch.is_tensor(t) else t
                                        for t in inputs)
    with torch.no_grad(), products(mode):
        distance, _, plan = reference.hgw_routing_reference(
            X_p, X_q, GWFactors(row, col, h1, h2), beta, eps=eps,
            outer_iters=outer, inner_iters=inner, return_plan=True,
            distance_only=True, chunk_entries=None)
    return distance.double(), plan.double()


def activation(d):
    return torch.exp(-(d - d.min(-1, keepdim=True)[0]) / TEMPERATURE)


def evaluate(name, problem_sets):
    """One row per setting and mode for an input set (layers pooled)."""
    rows = []
    for setting in SETTINGS:
        truth = [route(inp, setting, torch.float64) for inp in problem_sets]
        for mode in MODES:
            rows.append([name, '{:g}, {} x {}'.format(*setting), mode] +
                        compare(problem_sets, truth, setting, mode))
            print(rows[-1], flush=True)
    return rows


def compare(problem_sets, truth, setting, mode):
    """The table's scores of ``mode`` against the float64 ``truth``."""
    err, act, best, argmax = [], [], [], []
    for inp, (d_ref, T_ref) in zip(problem_sets, truth):
        d, T = route(inp, setting, torch.float32, mode)
        rel = ((d - d_ref).abs() / d_ref.abs().clamp_min(1e-30))
        err.append(rel.flatten())
        act.append((activation(d) - activation(d_ref)).abs().flatten())
        best.append((d.argmin(-1) == d_ref.argmin(-1)).float())
        argmax.append((T.argmax(-1) == T_ref.argmax(-1)).float().flatten())
    err, act = torch.cat(err), torch.cat(act)
    best, argmax = torch.cat(best), torch.cat(argmax)
    return [
        f'{err.mean():.1e}', f'{err.max():.1e}', f'{act.max():.1e}',
        f'{best.mean() * 100:.1f}%', f'{argmax.mean() * 100:.2f}%'
    ]


def main():
    args = input_parser(__doc__.splitlines()[0]).parse_args()
    rows = []
    for name, problem_sets in input_sets(args):
        rows += evaluate(name, problem_sets)
    body = (
        'The routing in float32 with its products as tensor cores would '
        'form them, emulated in the torch reference on the CPU, against '
        'the float64 reference at the same solver setting (eps, proximal '
        'steps x Sinkhorn iterations; activation at temperature '
        f'{TEMPERATURE}). '
        'distance err: relative error of the HGW distance (mean, largest); '
        'activation err: largest error of an activation; best type: '
        'locations whose best-aligned output type is the float64 one; '
        'argmax: plan rows whose largest entry is. '
        f'{args.locations} sampled locations per layer, all output types; '
        'the trained rows pool every capsule layer of the checkpoint.\n\n' +
        markdown_table([
            'inputs', 'solver', 'products', 'distance err (mean)',
            'distance err (max)', 'activation err (max)', 'best type', 'argmax'
        ], rows))
    print(body)
    if not args.no_write:
        write_section('tf32-emulated', 'Routing with TF32 products, '
                      'emulated (cpu)', body)


if __name__ == '__main__':
    main()
