"""FLOPs and parameters of a detector or segmentor config, HGW ops counted.

Counts one inference forward in tensor mode (the network without pre- and
post-processing) on a ``1 x 3 x H x W`` input, with mmengine's FlopAnalyzer
plus the handles of :mod:`mmhgw.analysis.flops` (elementwise work and
reductions, which the HGW solver is mostly made of, one FLOP per element;
products as multiply-adds; the routing op by the operations of its
reference). Ops without a handle are listed under "Not counted". Weights
are not loaded: FLOPs do not depend on them.

    python tools/analysis/get_flops.py CONFIG --shape H W \
        [--cfg-options k=v ...] [--table-depth 3]
"""
import argparse

import torch

from mmhgw.analysis import flop_analyzer, flop_report
from mmhgw.analysis.tracing import (TensorModeModel, add_shape_arg,
                                    load_traced_config)
from mmhgw.config_utils import build_config_model


def parse_args(argv=None):
    from mmengine.config import DictAction
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('config', help='config file (or pkg::path)')
    add_shape_arg(parser)
    parser.add_argument('--cfg-options', nargs='+', action=DictAction,
                        help='override config settings, key=value')
    parser.add_argument(
        '--table-depth', type=int, default=0,
        help='also print mmengine\'s per-module table to '
        'this depth (0: no table)')
    return parser.parse_args(argv)


def gflops(n):
    return f'{n / 1e9:.3f} G'


def main(argv=None):
    args = parse_args(argv)
    cfg, scope, shape = load_traced_config(args.config, args.cfg_options,
                                           args.shape)
    model = build_config_model(cfg, init=False)
    model.eval()  # stock ResNet.train() returns None: no chaining
    wrapped = TensorModeModel(model, scope, shape)
    image = torch.randn(1, 3, *shape)
    analyzer = flop_analyzer(wrapped, (image, ))
    with torch.no_grad():
        report = flop_report(analyzer, wrapped)
    params = sum(p.numel() for p in model.parameters())
    coverage = ('all ops counted' if not report.unsupported else
                'without the ops under "Not counted"')
    lines = [
        f'Config:       {args.config}',
        f'Input shape:  1 x 3 x {shape[0]} x {shape[1]}',
        f'FLOPs:        {gflops(report.total)}  ({coverage})',
        f'  products:   {gflops(report.products)}  (conv/matmul/einsum, '
        f'multiply-adds)',
        f'  other ops:  {gflops(report.elementwise)}  (elementwise, '
        f'reductions, norms)',
        f'  in HGWCaps: {gflops(report.hgw)}',
        f'Params:       {params / 1e6:.3f} M',
    ]
    if report.unsupported:
        lines.append('Not counted:  ' +
                     ', '.join(f'{k} x{v}'
                               for k, v in sorted(report.unsupported.items())))
    print('\n'.join(lines))
    if args.table_depth > 0:
        from mmengine.analysis.print_helper import complexity_stats_table
        print(
            complexity_stats_table(analyzer, max_depth=args.table_depth,
                                   show_param_shapes=False))
    return report, params


if __name__ == '__main__':
    main()
