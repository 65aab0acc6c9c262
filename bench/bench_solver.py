"""Throughput of the batched HGW solver against a per-problem POT loop.

Both run Algorithm 1 with the same iteration counts (outer proximal steps,
inner Sinkhorn iterations), so they compute the same iterates; the table
reports the largest distance difference and each side's marginal error.
Also: memory kept for backward by the envelope and unrolled gradients as the
iteration count grows.

    python bench/bench_solver.py [--device cuda] [--problems 4096]
"""
import argparse
import time
import warnings

import numpy as np
import torch

from mmhgw.benchmarking import (markdown_table, median_time, peak_cuda_bytes,
                                saved_for_backward_bytes, write_section)
from mmhgw.ot import embedding_distance, hgw_distance, round_to_polytope


def problems(n, V_p, V_q, d=8, dtype=torch.float32, device='cpu', seed=0):
    gen = torch.Generator().manual_seed(seed)
    X_p = torch.randn(n, V_p, d, generator=gen, dtype=dtype)
    X_q = torch.randn(n, V_q, d, generator=gen, dtype=dtype)
    mats = (embedding_distance(X_p, X_p), embedding_distance(X_q, X_q),
            embedding_distance(X_p, X_q, floor=0.0))
    return tuple(m.to(device) for m in mats)


def pot_loop(C_p, C_q, K, beta, eps, outer, inner):
    """Algorithm 1 per problem from POT's primitives (float64 numpy).

    POT's ``sinkhorn_log`` updates the column potential first; the problem is
    passed transposed, with the previous step's potential as warm start, so
    that it runs exactly our iterates (row update first, column potential
    warm-started across proximal steps).
    """
    import ot
    distances, row_err = [], 0.0
    for Cp, Cq, Kx in zip(C_p.cpu().double().numpy(),
                          C_q.cpu().double().numpy(),
                          K.cpu().double().numpy()):
        p = np.full(len(Cp), 1 / len(Cp))
        q = np.full(len(Cq), 1 / len(Cq))
        constC, hC1, hC2 = ot.gromov.init_matrix(Cp, Cq, p, q, 'kl_loss')
        T = np.outer(p, q)
        g = np.zeros(len(q))
        for _ in range(outer):
            cost = ot.gromov.tensor_product(constC, hC1, hC2, T) + beta * Kx
            with np.errstate(divide='ignore'):
                cost = cost - eps * np.log(T)
            Tt, log = ot.bregman.sinkhorn_log(q, p, cost.T, eps,
                                              numItermax=inner, stopThr=0.0,
                                              warn=False, log=True,
                                              warmstart=(g, np.zeros(len(p))))
            T, g = Tt.T, log['log_u']
        row_err = max(row_err, np.abs(T.sum(1) - p).max())
        # The same final rounding onto Gamma(p, q) as ours.
        T = round_to_polytope(torch.from_numpy(T), torch.from_numpy(p),
                              torch.from_numpy(q)).numpy()
        distances.append(
            ot.gromov.gwloss(constC, hC1, hC2, T) + beta * (Kx * T).sum())
    return np.array(distances), row_err


def unrounded_row_error(C_p, C_q, K, V_p, **kw):
    """Row-marginal error of our iterates before the final rounding."""
    import mmhgw.ot.solver as solver
    rounding = solver.round_to_polytope
    solver.round_to_polytope = lambda T, p, q: T
    try:
        plan = hgw_distance(C_p, C_q, K, **kw).plan
    finally:
        solver.round_to_polytope = rounding
    return (plan.sum(-1) - 1 / V_p).abs().max().item()


def throughput_rows(args):
    rows = []
    kw = dict(beta=0.5, eps=args.eps, outer_iters=args.outer,
              inner_iters=args.inner)
    for V_p, V_q in ((32, 8), (64, 16)):
        ref_n = min(args.pot_problems, args.problems)
        C_p, C_q, K = (
            m[:ref_n]
            for m in problems(args.problems, V_p, V_q, dtype=torch.float64))
        with warnings.catch_warnings():
            warnings.simplefilter('ignore')
            pot_loop(C_p[:2], C_q[:2], K[:2], 0.5, args.eps, 1, 1)  # warm-up
            start = time.perf_counter()
            ref_d, pot_err = pot_loop(C_p, C_q, K, eps=args.eps, beta=0.5,
                                      outer=args.outer, inner=args.inner)
        pot_rate = ref_n / (time.perf_counter() - start)
        for dtype in (torch.float32, torch.float64):
            C_p, C_q, K = problems(args.problems, V_p, V_q, dtype=dtype,
                                   device=args.device)
            seconds = median_time(lambda: hgw_distance(C_p, C_q, K, **kw),
                                  args.device, repeats=3)
            res = hgw_distance(C_p, C_q, K, **kw)
            ours_err = unrounded_row_error(C_p, C_q, K, V_p, **kw)
            diff = np.abs(res.distance[:ref_n].double().cpu().numpy() -
                          ref_d).max()
            rate = args.problems / seconds
            rows.append([
                f'{V_p}x{V_q}',
                str(dtype).split('.')[-1], args.problems, f'{rate:,.0f}',
                f'{pot_rate:,.0f}', f'{rate / pot_rate:,.0f}x', f'{diff:.1e}',
                f'{ours_err:.0e} / {pot_err:.0e}'
            ])
            print(rows[-1], flush=True)
    return rows


def memory_rows(args):
    rows = []
    C_p, C_q, K = problems(1024, 32, 8, device=args.device)
    for outer in (1, 2, 4, 8, 16):
        row = [outer]
        for grad in ('envelope', 'unroll'):
            inputs = [m.clone().requires_grad_() for m in (C_p, C_q, K)]

            def run():
                return hgw_distance(*inputs, beta=0.5, eps=args.eps,
                                    outer_iters=outer, inner_iters=args.inner,
                                    grad=grad).distance.sum()

            saved = saved_for_backward_bytes(run)
            row.append(f'{saved / 2**20:.1f}')
            if args.device.startswith('cuda'):
                row.append(
                    f'{peak_cuda_bytes(lambda: run().backward()) / 2**20:.1f}')
        rows.append(row)
        print(row, flush=True)
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--device', default='cpu')
    parser.add_argument('--problems', type=int, default=4096)
    parser.add_argument(
        '--pot-problems', type=int, default=256,
        help='problems timed in the POT loop (its rate is '
        'per problem, so a subset suffices)')
    parser.add_argument('--eps', type=float, default=1e-3)
    parser.add_argument('--outer', type=int, default=2)
    parser.add_argument('--inner', type=int, default=3)
    parser.add_argument('--no-write', action='store_true')
    args = parser.parse_args()

    rows = throughput_rows(args)
    table = markdown_table([
        'V_p x V_q', 'dtype', 'problems', 'ours (problems/s)',
        'POT loop (problems/s)', 'ratio', 'max |distance diff|',
        'row-marginal error before rounding, ours / POT'
    ], rows)
    mem = memory_rows(args)
    header = [
        'outer iters', 'envelope: saved for backward (MiB)',
        'unroll: saved for backward (MiB)'
    ]
    if args.device.startswith('cuda'):
        header = [
            'outer iters', 'envelope saved (MiB)',
            'envelope peak fwd+bwd (MiB)', 'unroll saved (MiB)',
            'unroll peak fwd+bwd (MiB)'
        ]
    body = (
        f'Settings: eps={args.eps}, {args.outer} proximal steps x '
        f'{args.inner} Sinkhorn iterations, KL loss, beta=0.5. The POT '
        f'loop (float64, numpy) is timed on {args.pot_problems} problems; '
        'its rate is per problem, and it runs the same iterates as ours '
        '(same update order and warm start) followed by the same rounding '
        'onto the transport polytope, so equal accuracy: the distance '
        'difference is float32 round-off. The marginal errors before '
        'rounding show how far few iterations at eps=1e-3 are from '
        'feasible, which is why every plan is rounded.'
        '\n\n' + table + '\n\nMemory kept for backward, 1024 problems of 32x8 '
        '(envelope mode keeps one plan whatever the iteration count):\n\n' +
        markdown_table(header, mem))
    print(body)
    if not args.no_write:
        key = 'solver-' + ('cuda' if args.device.startswith('cuda') else 'cpu')
        write_section(key, f'HGW solver ({key.split("-")[1].upper()})', body,
                      args.device)


if __name__ == '__main__':
    main()
