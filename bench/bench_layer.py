"""HGWCaps against the 3x3 convolution it replaces: parameters, forward and
forward+backward time, memory kept for backward (CPU) or peak memory (CUDA).

    python bench/bench_layer.py [--device cuda] [--routing hgw]
        [--backend auto]
"""
import argparse
import os.path as osp
import sys

import torch
import torch.nn as nn

sys.path.insert(0, osp.dirname(osp.dirname(osp.abspath(__file__))))
from bench.common import (markdown_table, median_time, peak_cuda_bytes,  # noqa
                          saved_for_backward_bytes, write_section)
from mmhgw.models import HGWCaps  # noqa: E402

CASES = [  # (channels, batch, H, W)
    (256, 8, 14, 14),
    (512, 8, 7, 7),
    (256, 1, 50, 84),
]


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

    row = [median_time(forward, device, repeats),
           median_time(train_step, device, repeats)]
    if torch.device(device).type == 'cuda':
        row.append(peak_cuda_bytes(train_step))
    else:
        row.append(saved_for_backward_bytes(lambda: module(x)))
    return row


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--device', default='cpu')
    parser.add_argument('--routing', default='hgw')
    parser.add_argument('--backend', default='auto',
                        help="routing kernels: auto, cpp, triton or torch")
    parser.add_argument('--repeats', type=int, default=3)
    parser.add_argument('--no-write', action='store_true')
    args = parser.parse_args()

    rows = []
    for channels, batch, H, W in CASES:
        torch.manual_seed(0)
        x = torch.randn(batch, channels, H, W, device=args.device)
        conv = nn.Conv2d(channels, channels, 3, padding=1,
                         bias=False).to(args.device)
        caps = HGWCaps(channels, channels, 3, padding=1, in_types=32,
                       out_types=32, routing=args.routing,
                       backend=args.backend).to(args.device)
        c = measure(conv, x, args.device, args.repeats)
        h = measure(caps, x, args.device, args.repeats)
        rows.append([
            f'{channels}ch {batch}x{H}x{W}', f'{params(conv):,}',
            f'{params(caps):,} ({params(caps) / params(conv):.3f}x)',
            f'{c[0] * 1e3:.1f}', f'{h[0] * 1e3:.1f} ({h[0] / c[0]:.0f}x)',
            f'{c[1] * 1e3:.1f}', f'{h[1] * 1e3:.1f} ({h[1] / c[1]:.0f}x)',
            f'{c[2] / 2**20:.1f}', f'{h[2] / 2**20:.1f} ({h[2] / c[2]:.0f}x)'
        ])
        print(rows[-1], flush=True)
    mem = 'peak fwd+bwd' if args.device.startswith('cuda') else \
        'saved for backward'
    cfg = caps.solver_cfg
    body = (
        'HGWCaps defaults: 32 input and output capsule types, 8 parts of '
        f'dim 8 per subcapsule, eps={cfg["eps"]:g}, {cfg["outer_iters"]} '
        f'proximal steps x {cfg["inner_iters"]} Sinkhorn iterations, '
        f'envelope gradients, routing={args.routing}, backend='
        f'{args.backend}. Times are medians in ms, ratios against the '
        'convolution in the same run.\n\n' +
        markdown_table([
            'case', 'conv params', 'HGW params', 'conv fwd', 'HGW fwd',
            'conv fwd+bwd', 'HGW fwd+bwd', f'conv {mem} (MiB)',
            f'HGW {mem} (MiB)'
        ], rows))
    print(body)
    if not args.no_write:
        key = f'layer-{args.routing}-{args.backend}-' + (
            'cuda' if args.device.startswith('cuda') else 'cpu')
        write_section(key, f'HGWCaps layer vs 3x3 convolution ({key})',
                      body, args.device)


if __name__ == '__main__':
    main()
