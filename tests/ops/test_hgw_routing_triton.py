"""The Triton backend of the HGW routing op against its torch reference,
run by the Triton interpreter on the CPU (``TRITON_INTERPRET=1``).

The interpreter is chosen when a kernel is decorated, so the cases run in
one child process that sets the variable before anything imports the
kernels (this process may already hold them compiled for a GPU); the
child runs this file as a script and prints the relative errors, which the
tests below check case by case. On CUDA machines ``tests/test_cuda.py``
runs the compiled kernels.
"""
import json
import os
import subprocess
import sys

import pytest
import torch

#: (M, N, V_p, V_q, d): odd sizes (padded blocks, masks) and full blocks.
SIZES = [(3, 2, 5, 3, 2), (2, 2, 8, 8, 4)]
#: (eps, routing, regularizer, outer_iters, inner_iters); inner_iters = 1
#: skips the kernel-domain iterations.
OPTIONS = [(1e-3, 'hgw', 'proximal', 2, 3), (1e-1, 'hgw', 'entropic', 2, 3),
           (1e-3, 'uniform', 'proximal', 2, 3),
           (1e-2, 'hgw', 'proximal', 2, 1)]
DTYPES = ['float64', 'float32']
NAMES = ['dist', 'parts', 'X_p', 'X_q', 'h1', 'h2', 'row', 'col', 'beta']


def case_ids():
    return [f'{dtype}-{"x".join(map(str, size))}-{o[0]}-{o[1]}-{o[2]}-'
            f'{o[3]}x{o[4]}' for size in SIZES for dtype in DTYPES
            for o in OPTIONS]


def run_cases():
    """Relative errors of every case (run by the child process)."""
    from test_hgw_routing import make_inputs, relative

    from mmhgw.ops import (hgw_routing, hgw_routing_reference,
                           hgw_routing_triton)
    results = {}
    ids = iter(case_ids())
    for size in SIZES:
        for dtype in DTYPES:
            for eps, routing, regularizer, outer, inner in OPTIONS:
                inputs = make_inputs(*size, getattr(torch, dtype))
                options = dict(eps=eps, outer_iters=outer,
                               inner_iters=inner, regularizer=regularizer,
                               routing=routing)
                ref = hgw_routing_reference(*inputs, **options)
                gen = torch.Generator().manual_seed(1)
                upstream = [torch.randn(t.shape, generator=gen,
                                        dtype=t.dtype) for t in ref]
                grads_ref = torch.autograd.grad(ref, inputs, upstream)
                out = hgw_routing(*inputs, backend='triton', **options)
                grads = torch.autograd.grad(out, inputs, upstream)
                errors = [relative(a, b) for a, b in zip(
                    (*out, *grads), (*ref, *grads_ref))]
                results[next(ids)] = dict(zip(NAMES, errors))
    # Only the distances reach the loss (the parts' gradient is None), and
    # the backward runs its locations in chunks of one.
    inputs = make_inputs(3, 2, 5, 3, 2, torch.float64)
    options = dict(eps=1e-2, outer_iters=2, inner_iters=3)
    hgw_routing_triton.BACKWARD_CHUNK_ENTRIES = 1
    ref = hgw_routing_reference(*inputs, **options)[0]
    grads_ref = torch.autograd.grad(ref.sum(), inputs)
    out = hgw_routing(*inputs, backend='triton', **options)[0]
    grads = torch.autograd.grad(out.sum(), inputs)
    errors = [relative(a, b) for a, b in zip((out, *grads), (ref, *grads_ref))]
    results['dist-only-chunked'] = dict(zip(NAMES[:1] + NAMES[2:], errors))
    # With a pose map: the parts recomputed in backward give its gradient.
    inputs = make_inputs(3, 3, 8, 8, 4, torch.float64)
    weight = torch.randn(3, 32, 5, generator=gen,
                         dtype=torch.float64).requires_grad_()
    dist, parts = hgw_routing_reference(*inputs, **options)
    ref = (dist, torch.einsum('mnk,nko->mno', parts.flatten(-2), weight))
    upstream = [torch.randn(t.shape, generator=gen, dtype=t.dtype)
                for t in ref]
    grads_ref = torch.autograd.grad(ref, [*inputs, weight], upstream)
    out = hgw_routing(*inputs, backend='triton', pose_weight=weight,
                      **options)
    grads = torch.autograd.grad(out, [*inputs, weight], upstream)
    errors = [relative(a, b) for a, b in zip((*out, *grads),
                                             (*ref, *grads_ref))]
    results['pose-map'] = dict(zip(NAMES + ['pose_weight'], errors))
    return results


@pytest.fixture(scope='module')
def interpreted():
    pytest.importorskip('triton')
    import mmhgw
    root = os.path.dirname(os.path.dirname(os.path.abspath(mmhgw.__file__)))
    env = dict(os.environ, TRITON_INTERPRET='1')
    # The child imports the same mmhgw as this process.
    env['PYTHONPATH'] = os.pathsep.join(
        [root] + [p for p in [env.get('PYTHONPATH')] if p])
    proc = subprocess.run([sys.executable, os.path.abspath(__file__)],
                          env=env, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize('case',
                         case_ids() + ['dist-only-chunked', 'pose-map'])
def test_triton_equals_reference(interpreted, case):
    errors = interpreted[case]
    for name, error in errors.items():
        # Values 1e-5, gradients 1e-4 (relative), as for every backend.
        limit = 1e-5 if name in ('dist', 'parts') else 1e-4
        assert error < limit, (name, errors)


if __name__ == '__main__':
    assert os.environ.get('TRITON_INTERPRET') == '1'
    print(json.dumps(run_cases()))
