"""Tiles and float32 products of the Triton routing kernels: time and
accuracy of each choice on a GPU.

Each variant changes one of the kernels' choices from what ships
(:data:`~mmhgw.ops.hgw_routing_triton.FORWARD_TILE`, ``BACKWARD_TILE``:
columns (types x parts) and warps per program;
``FORWARD_PRODUCTS``, ``BACKWARD_PRODUCTS``: ``tl.dot``'s precision for
float32 in each kernel). For each, the
op at a 256-channel capsule layer's size in float32 with the layer's
default output (distances only) and solver: forward and
forward + backward, ``triton.testing.do_bench`` medians interleaved over
``--rounds`` rounds (the median of the rounds' medians, and their range),
and its error against the float64 op on the same inputs: relative norm
error of the distances, the largest of the seven gradients', and the share
of locations whose best-aligned output type (smallest distance, what the
activation favours) is float64's.

    python bench/tune_triton.py [--device cuda] [--feature-map 50x84]
        [--rounds 3] [--variants 1,2] [--no-write] [--json FILE]

On the CPU it runs through the Triton interpreter (``TRITON_INTERPRET=1``,
small ``--feature-map`` only): a check of the script, not a timing.
"""
import argparse
import contextlib
import statistics

import bench_op  # beside this script: the layer's sizes and the timer
import torch
from bench_op import DIM, IN_TYPES, OUT_TYPES, PARTS, H, W

from mmhgw.benchmarking import (markdown_table, random_routing_inputs,
                                save_json, write_section)
from mmhgw.ops import hgw_routing
from mmhgw.ops import hgw_routing_triton as kernels

SOLVER = dict(bench_op.SOLVER, distance_only=True)

#: Each variant: the kernel settings it changes from what ships.
VARIANTS = [
    {},
    dict(FORWARD_TILE=(32, 4)),
    dict(FORWARD_TILE=(64, 8)),
    dict(FORWARD_TILE=(128, 4)),
    dict(FORWARD_TILE=(128, 8)),
    dict(BACKWARD_TILE=(16, 4)),
    dict(BACKWARD_TILE=(16, 8)),
    dict(BACKWARD_TILE=(32, 4)),
    dict(BACKWARD_TILE=(64, 4)),
    dict(BACKWARD_TILE=(128, 8)),
    dict(FORWARD_PRODUCTS='tf32'),
    dict(FORWARD_PRODUCTS='ieee'),
    dict(BACKWARD_PRODUCTS='tf32'),
    dict(BACKWARD_PRODUCTS='ieee'),
]
SETTINGS = ('FORWARD_TILE', 'BACKWARD_TILE', 'FORWARD_PRODUCTS',
            'BACKWARD_PRODUCTS')


@contextlib.contextmanager
def kernel_settings(**changes):
    unknown = set(changes) - set(SETTINGS)
    if unknown:
        raise ValueError(f'unknown kernel settings {sorted(unknown)}')
    saved = {k: getattr(kernels, k) for k in SETTINGS}
    try:
        for key, value in changes.items():
            setattr(kernels, key, value)
        yield
    finally:
        for key, value in saved.items():
            setattr(kernels, key, value)


def setting_text(value):
    """``(64, 8)`` -> ``'64x8'``; a precision as it is."""
    return 'x'.join(map(str, value)) if isinstance(value, tuple) else value


def variant_name(changes):
    if not changes:
        return 'shipped ({}/{}, {}/{})'.format(
            *(setting_text(getattr(kernels, k)) for k in SETTINGS))
    words = {
        'FORWARD_TILE': 'forward tile', 'BACKWARD_TILE': 'backward tile',
        'FORWARD_PRODUCTS': 'forward products',
        'BACKWARD_PRODUCTS': 'backward products'
    }
    return ', '.join(f'{words[k]} {setting_text(v)}'
                     for k, v in changes.items())


def run_op(inputs, upstream):
    """Distances and the gradients of ``<dist, upstream>`` w.r.t. every
    input."""
    leaves = [t.detach().clone().requires_grad_() for t in inputs]
    dist, _ = hgw_routing(*leaves, backend='triton', **SOLVER)
    grads = torch.autograd.grad(dist, leaves, upstream.to(dist.dtype))
    return dist.detach(), grads


def errors(out, ref):
    """(distance error, largest gradient error, best-type agreement)."""
    (dist, grads), (dist_ref, grads_ref) = out, ref

    def rel(a, b):
        return ((a.double() - b).norm() / b.norm().clamp_min(1e-300)).item()

    best = (dist.argmin(-1) == dist_ref.argmin(-1)).double().mean().item()
    return (rel(dist, dist_ref),
            max(rel(a, b) for a, b in zip(grads, grads_ref)), best)


def measure_variants(device, shape, rounds, variants=VARIANTS):
    locations = shape[0] * shape[1]
    inputs64 = [
        t.to(device) for t in random_routing_inputs(
            locations, OUT_TYPES, IN_TYPES, PARTS, DIM, torch.float64)
    ]
    inputs = [t.float() for t in inputs64]
    upstream = torch.randn(
        locations, OUT_TYPES, dtype=torch.float64,
        generator=torch.Generator().manual_seed(1)).to(device)
    ref = run_op(inputs64, upstream)
    measure = bench_op.timer(device, repeats=1)
    leaves = [t.clone().requires_grad_() for t in inputs]

    def forward():
        with torch.no_grad():
            return hgw_routing(*inputs, backend='triton', **SOLVER)

    def forward_backward():
        hgw_routing(*leaves, backend='triton', **SOLVER)[0].sum().backward()

    rows = [
        dict(name=variant_name(v), changes=v, forward=[], both=[])
        for v in variants
    ]
    for row in rows:  # compiles each variant and checks it
        with kernel_settings(**row['changes']):
            row['errors'] = errors(run_op(inputs, upstream), ref)
            # A tile the GPU cannot load runs halved: say so in the row.
            for (kernel, asked, _), ran in kernels._FITTED_TILES.items():
                if asked == getattr(kernels, kernel.upper() + '_TILE'):
                    row['name'] += (f' (the {kernel} kernel ran as '
                                    f'{setting_text(ran)})')
    for _ in range(rounds):
        for row in rows:
            with kernel_settings(**row['changes']):
                row['forward'].append(measure(forward))
                row['both'].append(measure(forward_backward))
        print('round done', flush=True)
    for row in rows:
        row['changes'] = {
            k: list(v) if isinstance(v, tuple) else v
            for k, v in row['changes'].items()
        }
    return rows


def section_body(rows, shape, rounds, cuda=True):
    base = rows[0]
    lines = []
    for row in rows:
        fwd, both = (statistics.median(row[k]) for k in ('forward', 'both'))
        ratio_f = fwd / statistics.median(base['forward'])
        ratio_b = both / statistics.median(base['both'])
        d, g, best = row['errors']
        lines.append([
            row['name'], f'{fwd * 1e3:.2f} ({min(row["forward"]) * 1e3:.2f}-'
            f'{max(row["forward"]) * 1e3:.2f})', f'{ratio_f:.2f}',
            f'{both * 1e3:.2f} ({min(row["both"]) * 1e3:.2f}-'
            f'{max(row["both"]) * 1e3:.2f})', f'{ratio_b:.2f}', f'{d:.1e}',
            f'{g:.1e}', f'{100 * best:.2f}%'
        ])
    timing = ('`triton.testing.do_bench` medians' if cuda else
              'single runs through the Triton interpreter (not a timing)')
    return (f'The Triton routing op at {shape[0]}x{shape[1]} locations of a '
            f'256-channel capsule layer ({IN_TYPES} input types of dim {DIM}, '
            f'{OUT_TYPES} output types of {PARTS} parts, eps '
            f'{SOLVER["eps"]:g}, {SOLVER["outer_iters"]} x '
            f'{SOLVER["inner_iters"]} iterations, distances only), float32, '
            f'for each change of one kernel setting from what ships. Times: '
            f'{timing}, the median over {rounds} interleaved rounds and their '
            'range, and the ratio to the shipped kernels. Errors against the '
            'float64 op on the same inputs: relative norm error of the '
            'distances, the largest of the seven gradients\', and the '
            'locations whose best-aligned output type is float64\'s.\n\n' +
            markdown_table([
                'variant', 'fwd (ms)', 'fwd vs shipped', 'fwd+bwd (ms)',
                'fwd+bwd vs shipped', 'distance err', 'gradient err (max)',
                'best type'
            ], lines))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--device', default='cuda')
    parser.add_argument(
        '--feature-map', default=f'{H}x{W}',
        help='HxW locations (default: stage 3 of Mask '
        'R-CNN at 800x1333)')
    parser.add_argument('--rounds', type=int, default=3)
    parser.add_argument(
        '--variants', help='comma-separated indices into VARIANTS (the '
        'shipped kernels, 0, always run first); default: all')
    parser.add_argument('--no-write', action='store_true')
    parser.add_argument('--json', help='also write the measurements here')
    args = parser.parse_args()
    try:
        shape = tuple(int(v) for v in args.feature_map.lower().split('x'))
        assert len(shape) == 2 and min(shape) >= 1
    except (ValueError, AssertionError):
        parser.error(f'--feature-map must be HxW (positive integers), got '
                     f'{args.feature_map!r}')
    if args.rounds < 1:
        parser.error('--rounds must be >= 1')
    if not kernels.available():
        parser.error('the Triton kernels need Triton and a CUDA device, or '
                     'TRITON_INTERPRET=1')
    variants = VARIANTS
    if args.variants:
        try:
            chosen = [int(v) for v in args.variants.split(',')]
            variants = [VARIANTS[0]] + [VARIANTS[i] for i in chosen if i]
            assert min(chosen) >= 0
        except (ValueError, IndexError, AssertionError):
            parser.error(f'--variants must be comma-separated indices from 0 '
                         f'to {len(VARIANTS) - 1}, got {args.variants!r}')
    cuda = torch.device(args.device).type == 'cuda'
    rows = measure_variants(args.device, shape, args.rounds, variants)
    body = section_body(rows, shape, args.rounds, cuda)
    print(body)
    if args.json:
        save_json(args.json, args.device, rows=rows, feature_map=shape,
                  rounds=args.rounds)
    if not args.no_write:
        write_section('triton-tuning-' + ('cuda' if cuda else 'cpu'),
                      'Triton routing kernels: tiles and float32 products',
                      body, args.device)


if __name__ == '__main__':
    main()
