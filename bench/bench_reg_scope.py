"""The training step of one HGWCaps layer with E on the whole network
(``reg_scope='network'``, the default) against E on the layer's own
embeddings (``reg_scope='layer'``), which forms E a second time from the
detached input: what confining E costs.

The two layers run in turn, ``--rounds`` times (median and range of the
per-round ratio).

    python bench/bench_reg_scope.py [--cases 128x2x28x28,...] [--rounds 7]
        [--no-write]
"""
import argparse
import statistics
import time

import torch
from bench_layer import add_cases_arg

from mmhgw.benchmarking import markdown_table, write_section
from mmhgw.models import HGWCaps

SCOPES = ('network', 'layer')


def train_step_seconds(layer, x):
    """Wall time of one forward and backward of ``layer`` in train mode."""
    xi = x.clone().requires_grad_()
    layer.zero_grad(set_to_none=True)
    start = time.perf_counter()
    layer(xi).square().mean().backward()
    return time.perf_counter() - start


def measure_case(case, rounds):
    """The table row of one case: both layers' median training step and
    the median and range of their per-round ratio."""
    channels, batch, H, W = case
    torch.manual_seed(0)
    x = torch.randn(batch, channels, H, W)
    layers = {}
    for scope in SCOPES:
        torch.manual_seed(0)
        layers[scope] = HGWCaps(channels, channels, 3, padding=1,
                                reg_scope=scope).train()
        # The warm-up's end: E and the routing both at work.
        layers[scope].beta.fill_(0.5)
        train_step_seconds(layers[scope], x)
    times = {scope: [] for scope in SCOPES}
    for _ in range(rounds):
        for scope in SCOPES:
            times[scope].append(train_step_seconds(layers[scope], x))
    ratios = [lay / net for lay, net in zip(times['layer'], times['network'])]
    return [
        f'{channels}ch {batch}x{H}x{W}',
        f'{statistics.median(times["network"]) * 1e3:.1f}',
        f'{statistics.median(times["layer"]) * 1e3:.1f}',
        f'{statistics.median(ratios):.2f}x '
        f'({min(ratios):.2f}-{max(ratios):.2f}x)'
    ]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_cases_arg(parser, [(128, 2, 28, 28)])
    parser.add_argument('--rounds', type=int, default=7)
    parser.add_argument('--no-write', action='store_true')
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error(f'--rounds must be >= 1, got {args.rounds}')
    rows = [measure_case(case, args.rounds) for case in args.cases]
    body = (f'{args.rounds} rounds, the two layers in turn; medians in ms, '
            'the ratio per round (median, range).\n\n' + markdown_table([
                'case', "fwd+bwd, reg_scope='network'",
                "fwd+bwd, reg_scope='layer'", 'layer / network'
            ], rows))
    print(body)
    if not args.no_write:
        write_section('reg-scope-cpu',
                      'Confining E to the layer: training step (cpu)', body)


if __name__ == '__main__':
    main()
