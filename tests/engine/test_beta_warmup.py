"""HGWBetaWarmupHook: the beta ramp of Algorithm 1 and the logged terms."""
import math
from types import SimpleNamespace

import pytest
import torch
import torch.nn as nn
from mmengine.logging import MessageHub
from mmengine.registry import HOOKS

import mmhgw  # noqa: F401
from mmhgw.engine import HGWBetaWarmupHook
from mmhgw.models import HGWCaps

SMALL = dict(in_types=4, out_types=4, num_parts=3, part_dim=4, padding=1)


def fake_runner(model, it=0):
    return SimpleNamespace(model=model, iter=it,
                           message_hub=MessageHub('hgw-test-hub'))


def test_hook_is_registered_and_ramps_beta():
    model = nn.Sequential(HGWCaps(16, 16, beta=0.8, **SMALL),
                          HGWCaps(16, 8, beta=0.4, **SMALL),
                          HGWCaps(8, 8, beta=0.5, ablation='C', **SMALL))
    hook = HOOKS.build(dict(type='HGWBetaWarmupHook', warmup_iters=10))
    assert isinstance(hook, HGWBetaWarmupHook)
    for it, expected in [(0, (0.0, 0.0)), (5, (0.4, 0.2)), (10, (0.8, 0.4)),
                         (25, (0.8, 0.4))]:
        hook.before_train_iter(fake_runner(model, it), batch_idx=it)
        assert model[0].beta.item() == pytest.approx(expected[0])
        assert model[1].beta.item() == pytest.approx(expected[1])
        # Ablation C's Wasserstein weight ramps as the others do.
        assert model[2].beta.item() == pytest.approx(expected[0] * 5 / 8)


def test_final_beta_override_and_bad_arguments():
    layer = HGWCaps(16, 16, beta=0.8, **SMALL)
    HGWBetaWarmupHook(warmup_iters=4, final_beta=0.2).before_train_iter(
        fake_runner(layer, 2), batch_idx=2)
    assert layer.beta.item() == pytest.approx(0.1)
    with pytest.raises(ValueError, match='warmup_iters'):
        HGWBetaWarmupHook(warmup_iters=-1)
    with pytest.raises(ValueError, match='final_beta'):
        HGWBetaWarmupHook(final_beta=2.0)


def test_hook_logs_regulariser_distance_and_beta():
    model = nn.Sequential(HGWCaps(16, 16, **SMALL),
                          HGWCaps(16, 8, align_weight=2.0, **SMALL))
    model.train()
    runner = fake_runner(model, 3)
    hook = HGWBetaWarmupHook(warmup_iters=6)
    hook.before_train_iter(runner, batch_idx=3)
    model(torch.randn(2, 16, 5, 5)).sum().backward()
    hook.after_train_iter(runner, batch_idx=3)
    scalars = runner.message_hub.log_scalars
    reg = sum(m.last_stats[0].item() for m in model)
    dist = sum(m.last_stats[1].item() for m in model) / 2
    assert scalars['train/hgw_reg'].current() == pytest.approx(reg)
    assert scalars['train/hgw_dist'].current() == pytest.approx(dist)
    assert scalars['train/hgw_beta'].current() == pytest.approx(0.25)
    # The alignment term, of the layer that trains with it alone.
    assert model[0].last_stats[2] is None
    align = model[1].last_stats[2].item()
    assert align > 0
    assert scalars['train/hgw_align'].current() == pytest.approx(align)


def test_hook_logs_no_alignment_term_without_it():
    model = HGWCaps(16, 8, **SMALL).train()
    runner = fake_runner(model, 3)
    hook = HGWBetaWarmupHook(warmup_iters=6)
    hook.before_train_iter(runner, batch_idx=3)
    model(torch.randn(2, 16, 5, 5)).sum().backward()
    hook.after_train_iter(runner, batch_idx=3)
    assert 'train/hgw_align' not in runner.message_hub.log_scalars


@pytest.mark.parametrize('kwargs,message', [
    (dict(warmup_iters='100'), "warmup_iters must be an int >= 0, got '100'"),
    (dict(warmup_iters=2.5), 'warmup_iters must be an int >= 0, got 2.5'),
    (dict(final_beta='0.5'), "final_beta must be a number, got '0.5'"),
    (dict(final_beta=math.nan), 'final_beta must be in [0, 1], got nan'),
])
def test_config_values_of_the_wrong_kind_are_named(kwargs, message):
    with pytest.raises(ValueError) as err:
        HGWBetaWarmupHook(**kwargs)
    assert message in str(err.value)
