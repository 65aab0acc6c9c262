"""HGWCaps against the 3x3 convolution it replaces: parameters, forward and
forward+backward time, memory kept for backward (CPU) or peak memory (CUDA),
and on the CPU the routing op's share of the layer's forward (what a faster
layer has to speed up).

    python bench/bench_layer.py [--device cuda] [--routing hgw]
        [--backend auto] [--cases 256x8x14x14,...] [--no-write] [--json FILE]
"""
import argparse

import torch
import torch.nn as nn

from mmhgw.benchmarking import (markdown_table, median_time, peak_cuda_bytes,
                                save_json, saved_for_backward_bytes,
                                write_section)
from mmhgw.models import HGWCaps
from mmhgw.ops.hgw_routing import OP_NAME

CASES = [  # (channels, batch, H, W)
    (256, 8, 14, 14),
    (512, 8, 7, 7),
    (256, 1, 50, 84),
]


def parse_cases(text):
    """``'CxBxHxW,...'`` -> ``[(C, B, H, W), ...]`` (an argparse type)."""
    cases = []
    for item in text.split(','):
        try:
            case = tuple(int(v) for v in item.lower().split('x'))
        except ValueError:
            case = ()
        if len(case) != 4 or min(case) < 1:
            raise argparse.ArgumentTypeError(
                f'comma-separated CxBxHxW (positive integers) expected, '
                f'got {item!r}')
        cases.append(case)
    return cases


def add_cases_arg(parser, default):
    """``--cases`` (``default``: a list of (C, B, H, W)) as parsed cases."""
    parser.add_argument(
        '--cases', type=parse_cases,
        default=','.join('x'.join(map(str, c)) for c in default),
        help='comma-separated CxBxHxW (channels, batch, height, width)')


def params(module):
    return sum(p.numel() for p in module.parameters())


def measure(module, x, device, repeats):
    module.train()

    def forward():
        with torch.no_grad():
            return module(x)

    def train_step():
        module.zero_grad(set_to_none=True)
        module(x).square().mean().backward()

    row = [
        median_time(forward, device, repeats),
        median_time(train_step, device, repeats)
    ]
    if torch.device(device).type == 'cuda':
        row.append(peak_cuda_bytes(train_step))
    else:
        row.append(saved_for_backward_bytes(lambda: module(x)))
    return row


def measure_case(channels, batch, H, W, device, routing, backend, repeats):
    """Parameters and ``measure`` of the convolution and the layer, and
    :func:`routing_op_share`."""
    torch.manual_seed(0)
    x = torch.randn(batch, channels, H, W, device=device)
    conv = nn.Conv2d(channels, channels, 3, padding=1, bias=False).to(device)
    caps = HGWCaps(channels, channels, 3, padding=1, in_types=32, out_types=32,
                   routing=routing, backend=backend).to(device)
    result = dict(case=[channels, batch, H, W], conv_params=params(conv),
                  hgw_params=params(caps))
    result['conv'] = measure(conv, x, device, repeats)
    result['hgw'] = measure(caps, x, device, repeats)
    result['op_share'] = routing_op_share(caps, x, device)
    return result, caps.solver_cfg


def routing_op_share(module, x, device):
    """The routing op's share of the layer's forward: torch.profiler's self
    CPU time of ``mmhgw::hgw_routing`` over that of every operator of one
    forward (None on CUDA, or where the op does not run, e.g. the torch
    backend)."""
    if torch.device(device).type == 'cuda':
        return None
    with torch.no_grad():
        module(x)
        with torch.profiler.profile() as prof:
            module(x)
    events = prof.key_averages()
    total = sum(e.self_cpu_time_total for e in events)
    op = sum(e.self_cpu_time_total for e in events if e.key == OP_NAME)
    return op / total if op and total else None


def table(results, cuda):
    mem = 'peak fwd+bwd' if cuda else 'saved for backward'
    rows = []
    for r in results:
        (channels, batch, H, W), c, h = r['case'], r['conv'], r['hgw']
        rows.append([
            f'{channels}ch {batch}x{H}x{W}', f'{r["conv_params"]:,}',
            f'{r["hgw_params"]:,} '
            f'({r["hgw_params"] / r["conv_params"]:.3f}x)',
            f'{c[0] * 1e3:.1f}', f'{h[0] * 1e3:.1f} ({h[0] / c[0]:.0f}x)',
            f'{c[1] * 1e3:.1f}', f'{h[1] * 1e3:.1f} ({h[1] / c[1]:.0f}x)',
            f'{c[2] / 2**20:.1f}', f'{h[2] / 2**20:.1f} ({h[2] / c[2]:.0f}x)'
        ])
        if not cuda:
            share = r.get('op_share')
            rows[-1].append('-' if share is None else f'{share:.0%}')
    return markdown_table([
        'case', 'conv params', 'HGW params', 'conv fwd', 'HGW fwd',
        'conv fwd+bwd', 'HGW fwd+bwd', f'conv {mem} (MiB)', f'HGW {mem} (MiB)'
    ] + ([] if cuda else ['routing op share of HGW fwd']), rows)


def section_body(results, solver_cfg, routing, backend, cuda):
    """The report text of a run: settings, then :func:`table`."""
    return (
        'HGWCaps defaults: 32 input and output capsule types, 8 parts of '
        f'dim 8 per subcapsule, eps={solver_cfg["eps"]:g}, '
        f'{solver_cfg["outer_iters"]} proximal steps x '
        f'{solver_cfg["inner_iters"]} Sinkhorn iterations, envelope '
        f'gradients, routing={routing}, backend={backend}. Times are '
        'medians in ms, ratios against the convolution in the same run.\n\n' +
        table(results, cuda))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--device', default='cpu')
    parser.add_argument('--routing', default='hgw')
    parser.add_argument('--backend', default='auto',
                        help="routing kernels: auto, cpp, triton or torch")
    add_cases_arg(parser, CASES)
    parser.add_argument('--repeats', type=int, default=3)
    parser.add_argument('--no-write', action='store_true')
    parser.add_argument('--json', help='also write the measurements here')
    args = parser.parse_args()
    cuda = torch.device(args.device).type == 'cuda'
    results = []
    for case in args.cases:
        result, solver_cfg = measure_case(*case, args.device, args.routing,
                                          args.backend, args.repeats)
        results.append(result)
        print(result, flush=True)
    body = section_body(results, solver_cfg, args.routing, args.backend, cuda)
    print(body)
    if args.json:
        save_json(args.json, args.device, results=results,
                  solver_cfg=solver_cfg, routing=args.routing,
                  backend=args.backend)
    if not args.no_write:
        key = f'layer-{args.routing}-{args.backend}-' + ('cuda'
                                                         if cuda else 'cpu')
        write_section(key, f'HGWCaps layer vs 3x3 convolution ({key})', body,
                      args.device)


if __name__ == '__main__':
    main()
