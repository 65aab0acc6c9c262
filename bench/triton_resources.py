"""Registers, spills and tensor-core use of the Triton routing kernels,
compiled for an NVIDIA GPU with no GPU present (Triton's compiler and its
bundled ``ptxas -v``), at the layer's problem shapes in float32 and
float64. Writes the section ``triton-resources`` of docs/benchmarks.md.

    python bench/triton_resources.py [--arch 90]
"""
import argparse

import torch

from mmhgw.benchmarking import markdown_table, write_section
from mmhgw.models.layers.hgw_caps_args import SOLVER_DEFAULTS
from mmhgw.ops.hgw_routing_triton import (BACKWARD_TILE, FORWARD_TILE,
                                          compile_report)

#: (V_p, V_q, d): the default layer (32 types, 8 parts of dim 8) and a
#: smaller one.
SHAPES = [(32, 8, 8), (16, 8, 8)]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--arch', type=int, default=90,
                        help='compute capability (90: H100 / H200)')
    args = parser.parse_args()
    rows = []
    for V_p, V_q, d in SHAPES:
        for dtype in (torch.float32, torch.float64):
            report = compile_report(args.arch, dtype, V_p, V_q, d)
            for kernel, r in report.items():
                rows.append([
                    f'{V_p} x {V_q}, d {d}',
                    str(dtype).split('.')[-1], kernel, r['num_warps'],
                    r['registers'], r['spill_bytes'],
                    f'{r["shared_bytes"] / 1024:.0f}',
                    'yes' if r['tensor_cores'] else 'no'
                ])
    body = markdown_table([
        'problem', 'dtype', 'kernel', 'warps', 'registers / thread',
        'spilled bytes (stores + loads)', 'shared memory (KiB)', 'tensor cores'
    ], rows)
    body += (
        '\n\nCompiled for sm_{0} by Triton {1}, the layer\'s solver '
        '(eps {4:g}, {5} x {6} iterations), tiles of {2} (forward) and {3} '
        '(backward) columns (types x parts) per program. No GPU is '
        'needed to produce this table; it says nothing of speed.'.format(
            args.arch, _triton_version(), FORWARD_TILE[0], BACKWARD_TILE[0],
            SOLVER_DEFAULTS['eps'], SOLVER_DEFAULTS['outer_iters'],
            SOLVER_DEFAULTS['inner_iters']))
    write_section('triton-resources',
                  f'Triton routing kernels: resources on sm_{args.arch}', body)
    print(body)


def _triton_version():
    import triton
    return triton.__version__


if __name__ == '__main__':
    main()
