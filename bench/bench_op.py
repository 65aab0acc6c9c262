"""The fused routing op against the 3x3 convolution it serves, per backend.

Times ``mmhgw.ops.hgw_routing`` at the size of a 256-channel capsule layer
in stage 3 of Mask R-CNN at 800x1333 (50x84 locations per image, 32 input
types of dim 8, 32 output types of 8 parts of dim 8, the layer's default
solver), for each output of ``--outputs``: ``poses`` (the pose map applied
in the op, as the layer with ``pose_from='plan'`` runs it) and
``distance`` (``distance_only=True``, as the layer's default mean pose
runs it), and the
``nn.Conv2d(256, 256, 3)`` it replaces on the same feature map: forward,
and forward plus backward of the sum of the outputs. On CUDA the times are
``triton.testing.do_bench`` medians (CUDA events) and the peak memory is
``torch.cuda.max_memory_allocated`` over the op's timing loops; on the CPU
they are medians of ``--repeats`` runs.

    python bench/bench_op.py [--device cuda] [--backends triton,torch]
        [--outputs poses,distance] [--batches 1,2] [--feature-map 50x84]
        [--repeats 5] [--no-write] [--json FILE]
"""
import argparse

import torch
from torch import nn

from mmhgw.benchmarking import (markdown_table, median_time,
                                random_routing_inputs, save_json,
                                write_section)
from mmhgw.models.layers.hgw_caps_args import SOLVER_DEFAULTS
from mmhgw.ops import hgw_routing

H, W, CHANNELS = 50, 84, 256
IN_TYPES, OUT_TYPES, PARTS, DIM = 32, 32, 8, 8
#: The capsule layer's solver.
SOLVER = {k: SOLVER_DEFAULTS[k] for k in ('eps', 'outer_iters', 'inner_iters')}
#: What the op returns beside the distances.
OUTPUTS = ('poses', 'distance')


def parse_feature_map(text):
    """``'HxW'`` -> ``(H, W)``."""
    try:
        h, w = (int(v) for v in text.lower().split('x'))
    except ValueError:
        raise ValueError(f'--feature-map must be HxW, got {text!r}') from None
    if h < 1 or w < 1:
        raise ValueError(f'--feature-map must be positive, got {text!r}')
    return h, w


def layer_inputs(locations, device, seed=0):
    """Float32 inputs of the op at a capsule layer's sizes
    (:func:`mmhgw.benchmarking.random_routing_inputs`) and a pose map."""
    inputs = random_routing_inputs(locations, OUT_TYPES, IN_TYPES, PARTS, DIM,
                                   torch.float32, seed)
    g = torch.Generator().manual_seed(seed + 1)
    pose_weight = torch.randn(OUT_TYPES, PARTS * DIM, CHANNELS // OUT_TYPES,
                              generator=g)
    return [t.to(device) for t in (*inputs, pose_weight)]


def timer(device, repeats):
    if torch.device(device).type == 'cuda':
        from triton.testing import do_bench

        def measure(fn):
            return do_bench(fn, warmup=25, rep=100, return_mode='median') / 1e3
    else:

        def measure(fn):
            return median_time(fn, device, repeats)

    return measure


def measure_op(backend, batch, device, measure, shape=(H, W), output='poses'):
    *inputs, pose_weight = layer_inputs(batch * shape[0] * shape[1], device)
    options = dict(SOLVER, backend=backend, pose_weight=pose_weight,
                   distance_only=output == 'distance')
    leaves = [t.clone().requires_grad_() for t in inputs]

    def forward():
        with torch.no_grad():
            return hgw_routing(*inputs, **options)

    def forward_backward():
        distance, poses = hgw_routing(*leaves, **options)
        loss = distance.sum()
        if poses is not None:
            loss = loss + poses.sum()
        loss.backward()

    cuda = torch.device(device).type == 'cuda'
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
    times = measure(forward), measure(forward_backward)
    peak = (torch.cuda.max_memory_allocated() - base) if cuda else None
    return times, peak


def measure_conv(batch, device, measure, shape=(H, W)):
    conv = nn.Conv2d(CHANNELS, CHANNELS, 3, padding=1, bias=False).to(device)
    x = torch.randn(batch, CHANNELS, *shape, device=device, requires_grad=True)

    def forward():
        with torch.no_grad():
            return conv(x)

    return measure(forward), measure(lambda: conv(x).sum().backward())


def table(rows, shape=(H, W)):
    """``rows``: (batch, backend, output, (fwd, fwd_bwd), peak,
    (conv_fwd, conv_fwd_bwd)) in seconds and bytes."""
    lines = []
    for batch, backend, output, (fwd, both), peak, (cf, cb) in rows:
        lines.append([
            f'{batch}x{shape[0]}x{shape[1]}', backend, output,
            f'{fwd * 1e3:.2f} ({fwd / cf:.0f}x)',
            f'{both * 1e3:.2f} ({both / cb:.0f}x)',
            '-' if peak is None else f'{peak / 2**20:.0f}', f'{cf * 1e3:.3f}',
            f'{cb * 1e3:.3f}'
        ])
    return markdown_table([
        'feature map', 'backend', 'output', 'op fwd (ms, vs conv)',
        'op fwd+bwd (ms, vs conv)', 'op peak (MiB)', 'conv fwd (ms)',
        'conv fwd+bwd (ms)'
    ], lines)


def section_body(rows, shape=(H, W), cuda=False):
    """The report text of a run: settings, then :func:`table`."""
    timer = ('`triton.testing.do_bench` medians' if cuda else 'Medians')
    return (f'`hgw_routing` at a 256-channel capsule layer '
            f'({IN_TYPES} input types of dim {DIM}, {OUT_TYPES} output types '
            f'of {PARTS} parts, eps={SOLVER["eps"]:g}, '
            f'{SOLVER["outer_iters"]}x{SOLVER["inner_iters"]} iterations, '
            'float32) against the 3x3 convolution on the same feature map; '
            'output: the poses (the pose map applied in the op), or the '
            'distances alone (`distance_only=True`, the layer\'s default '
            f'mean pose). {timer}; ratios against the convolution of the '
            'same run.\n\n' + table(rows, shape))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--device', default='cpu')
    parser.add_argument(
        '--backends', default=None,
        help='comma-separated; default: triton,torch on '
        'CUDA, cpp,torch on the CPU')
    parser.add_argument('--outputs', default=','.join(OUTPUTS),
                        help='comma-separated, of ' + ', '.join(OUTPUTS))
    parser.add_argument('--batches', default='1',
                        help='comma-separated images per feature map')
    parser.add_argument(
        '--feature-map', default=f'{H}x{W}',
        help='HxW of the feature map (default: stage 3 of '
        'Mask R-CNN at 800x1333)')
    parser.add_argument('--repeats', type=int, default=5)
    parser.add_argument('--no-write', action='store_true')
    parser.add_argument('--json', help='also write the measurements here')
    args = parser.parse_args()
    cuda = torch.device(args.device).type == 'cuda'
    backends = (args.backends or ('triton,torch' if cuda else 'cpp,torch'))
    try:
        batches = [int(b) for b in args.batches.split(',')]
    except ValueError:
        parser.error(f'--batches must be comma-separated integers, got '
                     f'{args.batches!r}')
    try:
        shape = parse_feature_map(args.feature_map)
    except ValueError as err:
        parser.error(str(err))
    outputs = args.outputs.split(',')
    unknown = sorted(set(outputs) - set(OUTPUTS))
    if unknown:
        parser.error(f'--outputs takes {", ".join(OUTPUTS)}; got {unknown}')
    measure = timer(args.device, args.repeats)
    rows = []
    for batch in batches:
        conv = measure_conv(batch, args.device, measure, shape)
        for backend in backends.split(','):
            for output in outputs:
                times, peak = measure_op(backend, batch, args.device, measure,
                                         shape, output)
                rows.append((batch, backend, output, times, peak, conv))
                print(rows[-1], flush=True)
    body = section_body(rows, shape, cuda)
    print(body)
    if args.json:
        save_json(args.json, args.device, rows=rows, feature_map=shape)
    if not args.no_write:
        key = 'routing-op-' + ('cuda' if cuda else 'cpu')
        write_section(key, f'Routing op vs 3x3 convolution ({key})', body,
                      args.device)


if __name__ == '__main__':
    main()
