"""The same maths on a GPU; skipped on machines without CUDA."""
import pytest
import torch

from mmhgw.benchmarking import random_routing_inputs
from mmhgw.ot import embedding_distance, hgw_distance

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(),
                                reason='needs a CUDA device')


def test_solver_on_cuda_matches_cpu():
    gen = torch.Generator().manual_seed(0)
    X_p = torch.randn(4, 16, 6, generator=gen)
    X_q = torch.randn(4, 5, 6, generator=gen)
    args = (embedding_distance(X_p, X_p), embedding_distance(X_q, X_q),
            embedding_distance(X_p, X_q))
    kw = dict(beta=0.5, eps=1e-3, outer_iters=3, inner_iters=4)
    cpu = hgw_distance(*args, **kw)
    gpu = hgw_distance(*(a.cuda() for a in args), **kw)
    torch.testing.assert_close(gpu.plan.cpu(), cpu.plan, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(gpu.distance.cpu(), cpu.distance, atol=1e-5,
                               rtol=1e-4)


def test_layer_forward_backward_on_cuda():
    from mmhgw.models import HGWCaps
    torch.manual_seed(0)
    layer = HGWCaps(32, 32, 3, padding=1, in_types=8, out_types=8, num_parts=4,
                    part_dim=4).cuda().train()
    x = torch.randn(2, 32, 12, 10, device='cuda', requires_grad=True)
    out = layer(x)
    assert out.shape == (2, 32, 12, 10) and out.is_cuda
    out.square().sum().backward()
    assert torch.isfinite(x.grad).all()
    assert torch.isfinite(layer.subcapsules.grad).all()


@pytest.mark.parametrize('eps,regularizer', [(1e-3, 'proximal'),
                                             (1e-1, 'entropic')])
@pytest.mark.parametrize('dtype', [torch.float64, torch.float32])
def test_triton_routing_matches_reference(dtype, eps, regularizer,
                                          device='cuda'):
    """The Triton kernels at the layer's sizes against the float64 torch
    reference on the CPU: float64 within the oracle tolerances of
    tests/ops; float32 within 1e-4 (the float32 reference itself is 3e-6
    from float64 here, and Triton's float32 exp and log are the GPU's
    approximate instructions). ``device`` is a parameter so that the same
    check can run through the Triton interpreter on the CPU."""
    pytest.importorskip('triton')
    from mmhgw.ops import hgw_routing, hgw_routing_reference
    inputs = [
        t.requires_grad_() for t in random_routing_inputs(64, 32, 32, 8, 8)
    ]
    options = dict(eps=eps, outer_iters=3, inner_iters=4,
                   regularizer=regularizer)
    ref = hgw_routing_reference(*inputs, **options)
    gen = torch.Generator().manual_seed(1)
    upstream = [
        torch.randn(t.shape, generator=gen, dtype=t.dtype) for t in ref
    ]
    grads_ref = torch.autograd.grad(ref, inputs, upstream)
    ins = [t.detach().to(device, dtype).requires_grad_() for t in inputs]
    out = hgw_routing(*ins, backend='triton', **options)
    grads = torch.autograd.grad(out, ins,
                                [u.to(device, dtype) for u in upstream])
    limits = (1e-5, 1e-4) if dtype == torch.float64 else (1e-4, 1e-4)
    names = ['dist', 'parts', 'X_p', 'X_q', 'h1', 'h2', 'row', 'col', 'beta']
    for i, (name, a,
            b) in enumerate(zip(names, (*out, *grads), (*ref, *grads_ref))):
        error = ((a.detach().cpu().double() - b).norm() / b.norm()).item()
        assert error < limits[min(i, 2) // 2], (name, error)


@pytest.mark.parametrize('dtype', [torch.float64, torch.float32])
def test_triton_distance_only_matches_reference(dtype):
    """``distance_only=True`` (the layer's default mean pose) at the layer's
    sizes: the reference's distances and their gradients, no parts."""
    pytest.importorskip('triton')
    from mmhgw.ops import hgw_routing, hgw_routing_reference
    inputs = [
        t.requires_grad_() for t in random_routing_inputs(64, 32, 32, 8, 8)
    ]
    options = dict(eps=1e-2, outer_iters=3, inner_iters=10)
    ref = hgw_routing_reference(*inputs, **options)[0]
    upstream = torch.randn(ref.shape, dtype=ref.dtype,
                           generator=torch.Generator().manual_seed(1))
    grads_ref = torch.autograd.grad(ref, inputs, upstream)
    ins = [t.detach().to('cuda', dtype).requires_grad_() for t in inputs]
    dist, parts = hgw_routing(*ins, backend='triton', distance_only=True,
                              **options)
    assert parts is None
    grads = torch.autograd.grad(dist, ins, upstream.to('cuda', dtype))
    names = ['dist', 'X_p', 'X_q', 'h1', 'h2', 'row', 'col', 'beta']
    for name, a, b in zip(names, (dist, *grads), (ref, *grads_ref)):
        error = ((a.detach().cpu().double() - b).norm() / b.norm()).item()
        assert error < 1e-4, (name, error)
