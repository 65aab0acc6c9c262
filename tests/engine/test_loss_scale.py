"""HGWLossScaleHook: the regulariser E reaches the optimiser with the weight
of the task loss under AMP loss scaling and gradient accumulation."""
import copy
import functools
from types import SimpleNamespace

import pytest
import torch
import torch.nn as nn
from mmengine.optim import AmpOptimWrapper, OptimWrapper
from mmengine.registry import HOOKS

import mmhgw  # noqa: F401
from mmhgw.engine import HGWLossScaleHook, loss_factor
from mmhgw.models import HGWCaps

SMALL = dict(in_types=4, out_types=4, num_parts=3, part_dim=4, padding=1)


@pytest.fixture
def amp_on_cpu(monkeypatch):
    """``AmpOptimWrapper`` as on a GPU, with torch's CPU GradScaler (its
    constructor refuses to run without an accelerator)."""
    import mmengine.optim.optimizer.amp_optimizer_wrapper as amp
    monkeypatch.setattr(amp, 'is_cuda_available', lambda: True)
    monkeypatch.setattr(amp, 'GradScaler',
                        functools.partial(torch.amp.GradScaler, 'cpu'))

    def build(params):
        return AmpOptimWrapper(optimizer=torch.optim.SGD(params, lr=0.1),
                               loss_scale=dict(init_scale=2.0**16))

    return build


def plain(accumulative_counts):

    def build(params):
        return OptimWrapper(torch.optim.SGD(params, lr=0.1),
                            accumulative_counts=accumulative_counts)

    return build


def twin_layers(backend):
    torch.manual_seed(0)
    layer = HGWCaps(16, 8, backend=backend, **SMALL).train()
    layer.beta.fill_(0.5)
    return layer, copy.deepcopy(layer)


def backward_through(wrapper, loss):
    """What ``OptimWrapper.update_params`` does before its step."""
    wrapper.backward(wrapper.scale_loss(loss))


def run_iterations(build_wrapper, backend, iters, init_counts=0, max_counts=10,
                   hook=True):
    """Gradients of the layer trained with injected E (through the hook)
    and of its twin trained on the explicit ``loss + E``."""
    layer, twin = twin_layers(backend)
    ours, theirs = build_wrapper(layer.parameters()), \
        build_wrapper(twin.parameters())
    for wrapper, model in ((ours, layer), (theirs, twin)):
        wrapper.initialize_count_status(model, init_counts, max_counts)
    gen = torch.Generator().manual_seed(1)
    for it in range(iters):
        x = torch.randn(2, 16, 5, 6, generator=gen)
        weight = torch.randn(2, 8, 5, 6, generator=gen)
        if hook:
            HGWLossScaleHook().before_train_iter(
                SimpleNamespace(model=layer, optim_wrapper=ours), it)
        backward_through(ours, (layer(x) * weight).sum())
        out, reg, _ = twin.forward_terms(x)
        assert reg is not None and reg.item() > 0
        backward_through(theirs, (out * weight).sum() + reg)
    return layer, twin


def assert_same_grads(layer, twin):
    for (name, a), b in zip(layer.named_parameters(), twin.parameters()):
        torch.testing.assert_close(a.grad, b.grad, msg=name)


@pytest.mark.parametrize('backend', ['torch', 'auto'])
def test_amp_scaled_gradients_equal_explicit_sum(amp_on_cpu, backend):
    layer, twin = run_iterations(amp_on_cpu, backend, iters=1)
    assert layer.loss_scale == 2.0**16
    # Loss-scaled gradients: E's share is 2^16 times its unscaled gradient.
    assert twin.subcapsules.grad.abs().max() > 100
    assert_same_grads(layer, twin)


def test_without_the_hook_amp_drops_the_regulariser(amp_on_cpu):
    layer, twin = run_iterations(amp_on_cpu, 'auto', iters=1, hook=False)
    assert not torch.allclose(layer.subcapsules.grad, twin.subcapsules.grad)


@pytest.mark.parametrize('init_counts,factor', [(0, 1 / 4), (8, 1 / 2)])
def test_accumulated_gradients_equal_explicit_sum(init_counts, factor):
    # 4 accumulated iterations per update; of 10 in all, the last 2 form an
    # update of their own and are divided by 2.
    layer, twin = run_iterations(plain(4), 'auto', iters=2,
                                 init_counts=init_counts, max_counts=10)
    assert layer.loss_scale == pytest.approx(factor)
    assert_same_grads(layer, twin)


def test_plain_wrapper_factor_is_one():
    layer, twin = run_iterations(plain(1), 'torch', iters=2)
    assert layer.loss_scale == 1.0
    assert_same_grads(layer, twin)


def test_hook_is_registered_and_reaches_nested_layers(amp_on_cpu):
    model = nn.Sequential(HGWCaps(16, 16, **SMALL),
                          nn.Sequential(HGWCaps(16, 8, **SMALL)))
    wrapper = amp_on_cpu(model.parameters())
    hook = HOOKS.build(dict(type='HGWLossScaleHook'))
    hook.before_train_iter(SimpleNamespace(model=model, optim_wrapper=wrapper),
                           0)
    assert [m.loss_scale for m in (model[0], model[1][0])] == [2.0**16] * 2
    assert loss_factor(wrapper) == 2.0**16
