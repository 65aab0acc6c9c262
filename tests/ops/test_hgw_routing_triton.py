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

#: (M, N, V_p, V_q, d): odd sizes (padded blocks, masks), full blocks, and
#: five types: a partial tile of types, several tiles in the backward.
SIZES = [(3, 2, 5, 3, 2), (2, 2, 8, 8, 4), (2, 5, 8, 8, 4)]
#: (eps, routing, regularizer, outer_iters, inner_iters); inner_iters = 1
#: skips the kernel-domain iterations.
OPTIONS = [(1e-3, 'hgw', 'proximal', 2, 3), (1e-1, 'hgw', 'entropic', 2, 3),
           (1e-3, 'uniform', 'proximal', 2, 3),
           (1e-2, 'hgw', 'proximal', 2, 1)]
DTYPES = ['float64', 'float32']
#: Size of the non-finite cases: room for every poisoned index, padded
#: blocks.
POISON_SIZES = [(3, 2, 5, 3, 2)]
NAMES = ['dist', 'parts', 'X_p', 'X_q', 'h1', 'h2', 'row', 'col', 'beta']


def case_ids():
    return [
        f'{dtype}-{"x".join(map(str, size))}-{o[0]}-{o[1]}-{o[2]}-'
        f'{o[3]}x{o[4]}' for size in SIZES for dtype in DTYPES for o in OPTIONS
    ]


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
                options = dict(eps=eps, outer_iters=outer, inner_iters=inner,
                               regularizer=regularizer, routing=routing)
                ref = hgw_routing_reference(*inputs, **options)
                gen = torch.Generator().manual_seed(1)
                upstream = [
                    torch.randn(t.shape, generator=gen, dtype=t.dtype)
                    for t in ref
                ]
                grads_ref = torch.autograd.grad(ref, inputs, upstream)
                out = hgw_routing(*inputs, backend='triton', **options)
                grads = torch.autograd.grad(out, inputs, upstream)
                errors = [
                    relative(a, b)
                    for a, b in zip((*out, *grads), (*ref, *grads_ref))
                ]
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
    # distance_only: the forward forms no parts, the backward reads no
    # parts' gradient.
    out, none = hgw_routing(*inputs, backend='triton', distance_only=True,
                            **options)
    grads = torch.autograd.grad(out.sum(), inputs)
    errors = [relative(a, b) for a, b in zip((out, *grads), (ref, *grads_ref))]
    results['distance-only'] = dict(zip(NAMES[:1] + NAMES[2:], errors),
                                    parts=float(none is not None))
    # With a pose map: the parts recomputed in backward give its gradient.
    inputs = make_inputs(3, 3, 8, 8, 4, torch.float64)
    weight = torch.randn(3, 32, 5, generator=gen,
                         dtype=torch.float64).requires_grad_()
    dist, parts = hgw_routing_reference(*inputs, **options)
    ref = (dist, torch.einsum('mnk,nko->mno', parts.flatten(-2), weight))
    upstream = [
        torch.randn(t.shape, generator=gen, dtype=t.dtype) for t in ref
    ]
    grads_ref = torch.autograd.grad(ref, [*inputs, weight], upstream)
    out = hgw_routing(*inputs, backend='triton', pose_weight=weight, **options)
    grads = torch.autograd.grad(out, [*inputs, weight], upstream)
    errors = [
        relative(a, b) for a, b in zip((*out, *grads), (*ref, *grads_ref))
    ]
    results['pose-map'] = dict(zip(NAMES + ['pose_weight'], errors))
    results.update(special_cases())
    results.update(tile_fitting_cases())
    return results


class SmallGPU:
    """A kernel as launched on a GPU with shared memory for tiles of at
    most ``columns`` columns: larger ones raise OutOfResources, as Triton
    does when it loads such a kernel."""

    def __init__(self, kernel, columns):
        self.kernel, self.columns = kernel, columns

    def __getitem__(self, grid):

        def launch(*args, BN, BQ, **kwargs):
            from triton.runtime.errors import OutOfResources
            if BN * BQ > self.columns:
                raise OutOfResources(BN * BQ * 1024, self.columns * 1024,
                                     'shared memory')
            return self.kernel[grid](*args, BN=BN, BQ=BQ, **kwargs)

        return launch


def tile_fitting_cases():
    """Kernels whose tiles do not fit the GPU: halved until they do (the
    op's values and gradients those of the reference, the fitted tiles
    remembered, a warning each), or the error raised where even 16 columns
    do not fit."""
    import warnings

    from test_hgw_routing import make_inputs, relative

    from mmhgw.ops import (hgw_routing, hgw_routing_reference,
                           hgw_routing_triton)
    kernels = (hgw_routing_triton._forward_tile_kernel,
               hgw_routing_triton._backward_tile_kernel)
    results = {}
    inputs = make_inputs(3, 5, 8, 8, 4, torch.float64)
    options = dict(eps=1e-2, outer_iters=2, inner_iters=3)
    ref = hgw_routing_reference(*inputs, **options)
    grads_ref = torch.autograd.grad(ref[0].sum() + ref[1].sum(), inputs)
    for columns in (16, 8):
        hgw_routing_triton._forward_tile_kernel = SmallGPU(kernels[0], columns)
        hgw_routing_triton._backward_tile_kernel = SmallGPU(
            kernels[1], columns)
        hgw_routing_triton._FITTED_TILES.clear()
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter('always')
                out = hgw_routing(*inputs, backend='triton', **options)
                grads = torch.autograd.grad(out[0].sum() + out[1].sum(),
                                            inputs)
        except Exception as err:
            results[f'tiles-{columns}'] = dict(error=type(err).__name__)
            continue
        finally:
            (hgw_routing_triton._forward_tile_kernel,
             hgw_routing_triton._backward_tile_kernel) = kernels
        errors = [
            relative(a, b) for a, b in zip((*out, *grads), (*ref, *grads_ref))
        ]
        fitted = hgw_routing_triton._FITTED_TILES.items()
        results[f'tiles-{columns}'] = dict(
            errors=dict(zip(NAMES, errors)),
            fitted=sorted([k[0], list(k[1]), list(v)] for k, v in fitted),
            warnings=sum('HGW routing' in str(w.message) for w in caught))
    return results


def special_cases():
    """Non-finite inputs (NaN masks equal to the reference's), large
    embeddings and parts far from every component (relative errors against
    the float64 reference), eps at its bound (finite) and double backward
    (refused)."""
    from test_hgw_routing import (POISONS, far_part_inputs, make_inputs,
                                  nan_where_the_reference_has_nan,
                                  poisoned_inputs, relative)

    from mmhgw.ops import hgw_routing, hgw_routing_reference
    from mmhgw.ot import MIN_EPS
    results = {}
    for size in POISON_SIZES:
        for poison in POISONS:
            inputs = poisoned_inputs(size, torch.float32, *poison)
            _, checks = nan_where_the_reference_has_nan(
                'triton', inputs, eps=1e-2, outer_iters=2, inner_iters=3)
            results[poison_id(size, poison)] = {
                name: float(not (same and close))
                for name, same, close in checks
            }
    inputs = [t.detach() for t in make_inputs(3, 2, 8, 8, 4, torch.float64)]
    inputs[0], inputs[1] = inputs[0] * 1e30, inputs[1] * 5e29
    options = dict(eps=1e-2, outer_iters=2, inner_iters=3)
    ref = hgw_routing_reference(*inputs, **options)
    out = hgw_routing(*[t.float() for t in inputs], backend='triton',
                      **options)
    results['large'] = {
        name: relative(a.double(), b)
        for name, a, b in zip(NAMES, out, ref)
    }
    inputs = far_part_inputs()
    options = dict(eps=1e-3, outer_iters=3, inner_iters=10)
    ref = hgw_routing_reference(*inputs, **options)
    out = hgw_routing(*[t.float() for t in inputs], backend='triton',
                      **options)
    results['far-part'] = {
        name: relative(a.double(), b)
        for name, a, b in zip(['dist', 'parts'], out, ref)
    }
    inputs = make_inputs(3, 2, 8, 8, 4, torch.float32)
    out = hgw_routing(*inputs, eps=MIN_EPS, outer_iters=5, inner_iters=3,
                      backend='triton')
    grads = torch.autograd.grad(out[0].sum() + out[1].sum(), inputs)
    results['min-eps'] = {
        'non-finite': float(not all(
            torch.isfinite(t).all() for t in (*out, *grads)))
    }
    out = hgw_routing(*inputs, eps=1e-2, outer_iters=2, inner_iters=2,
                      backend='triton')
    (grad, ) = torch.autograd.grad(out[0].sum(), inputs[0], create_graph=True)
    try:
        grad.sum().backward()
        refused = False
    except RuntimeError as err:
        refused = 'mmhgw::hgw_routing is once differentiable' in str(err)
    results['double-backward'] = {'not refused': float(not refused)}
    return results


def poison_id(size, poison):
    return f'poison-{"x".join(map(str, size))}-{poison[0]}-{poison[2]}'


def special_ids():
    from test_hgw_routing import POISONS
    return ([poison_id(size, p) for size in POISON_SIZES for p in POISONS] +
            ['large', 'far-part', 'min-eps', 'double-backward'])


@pytest.fixture(scope='module')
def interpreted():
    pytest.importorskip('triton')
    import mmhgw
    root = os.path.dirname(os.path.dirname(os.path.abspath(mmhgw.__file__)))
    env = dict(os.environ, TRITON_INTERPRET='1')
    # The child imports the same mmhgw as this process.
    env['PYTHONPATH'] = os.pathsep.join(
        [root] + [p for p in [env.get('PYTHONPATH')] if p])
    proc = subprocess.run(
        [sys.executable, os.path.abspath(__file__)], env=env,
        capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize(
    'case',
    case_ids() + ['dist-only-chunked', 'distance-only', 'pose-map'])
def test_triton_equals_reference(interpreted, case):
    errors = interpreted[case]
    for name, error in errors.items():
        # Values 1e-5, gradients 1e-4 (relative), as for every backend.
        limit = 1e-5 if name in ('dist', 'parts') else 1e-4
        assert error < limit, (name, errors)


def test_kernel_globals_compare_equal_to_themselves():
    """Triton (3.6) refuses to launch a kernel whose constexpr globals no
    longer compare equal to their values at its compilation, which a NaN
    never does."""
    triton = pytest.importorskip('triton')
    from mmhgw.ops import hgw_routing_triton
    found = [(name, value.value)
             for name, value in vars(hgw_routing_triton).items()
             if isinstance(value, triton.language.constexpr)]
    assert any(name == 'NEG' for name, _ in found)
    for name, value in found:
        assert value == value, name


def test_a_tile_too_large_for_the_gpu_is_halved_until_it_fits(interpreted):
    from mmhgw.ops.hgw_routing_triton import BACKWARD_TILE, FORWARD_TILE
    fits = interpreted['tiles-16']
    assert fits['fitted'] == [[
        'backward', list(BACKWARD_TILE), [16, BACKWARD_TILE[1]]
    ], ['forward', list(FORWARD_TILE), [16, FORWARD_TILE[1]]]]
    for name, error in fits['errors'].items():
        assert error < (1e-5 if name in ('dist', 'parts') else 1e-4), fits
    # one warning per halving
    halvings = sum(t[0].bit_length() - 5
                   for t in (FORWARD_TILE, BACKWARD_TILE))
    assert fits['warnings'] == halvings
    # 16 columns is the smallest tile: the error reaches the caller
    assert interpreted['tiles-8'] == dict(error='OutOfResources')


@pytest.mark.parametrize('case', special_ids())
def test_triton_on_non_finite_large_and_extreme_inputs(interpreted, case):
    """As the CPU backends in test_hgw_routing.py: NaN exactly where the
    reference has it (1 marks a mismatch), finite outputs of large
    embeddings (relative error against float64), finite iterates at the
    smallest eps, and double backward refused."""
    for name, error in interpreted[case].items():
        assert error < 1e-5, (name, interpreted[case])


if __name__ == '__main__':
    assert os.environ.get('TRITON_INTERPRET') == '1'
    print(json.dumps(run_cases()))
