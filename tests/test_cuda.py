"""The same maths on a GPU; skipped on machines without CUDA."""
import pytest
import torch

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
    layer = HGWCaps(32, 32, 3, padding=1, in_types=8, out_types=8,
                    num_parts=4, part_dim=4).cuda().train()
    x = torch.randn(2, 32, 12, 10, device='cuda', requires_grad=True)
    out = layer(x)
    assert out.shape == (2, 32, 12, 10) and out.is_cuda
    out.square().sum().backward()
    assert torch.isfinite(x.grad).all()
    assert torch.isfinite(layer.subcapsules.grad).all()
