"""A checkpoint that does not fit the model is refused before anything of it
is applied (evaluation, unless told otherwise; resume, always), and a
capsule ``beta`` outside [0, 1] is refused on every loading path."""
import math

import pytest
import torch
import torch.nn as nn
from mmengine.runner import Runner
from test_checkpoint import make_runner

import mmhgw  # noqa: F401
from mmhgw.engine.hooks import CheckpointFitHook
from mmhgw.engine.hooks.checkpoint_fit import (CheckpointMismatch,
                                               checkpoint_fit,
                                               load_fitting_weights)
from mmhgw.models import HGWCaps


def test_fit_lists_missing_unexpected_and_reshaped_keys():
    model = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4))
    state = {f'module.{k}': v for k, v in model.state_dict().items()}
    assert checkpoint_fit(model, state) == ([], [], [])
    del state['module.1.num_batches_tracked']  # mmengine ignores it
    assert checkpoint_fit(model, state) == ([], [], [])
    del state['module.1.running_var']
    state['module.2.weight'] = torch.ones(1)
    state['module.0.weight'] = torch.ones(5, 3)
    missing, unexpected, reshaped = checkpoint_fit(model, state)
    assert missing == ['1.running_var']
    assert unexpected == ['2.weight']
    assert reshaped == [
        '0.weight: (5, 3) in the checkpoint vs (4, 3) in '
        'the model'
    ]


class FakeRunner:

    def __init__(self, model):
        self.model = model
        self.warnings = []
        outer = self

        class logger:

            @staticmethod
            def warning(msg):
                outer.warnings.append(msg)

        self.logger = logger


def test_evaluation_refuses_a_partial_checkpoint_unless_allowed():
    model = nn.Sequential(nn.Linear(3, 4), nn.Linear(4, 2))
    state = dict(
        state_dict={
            '0.weight': torch.ones(4, 3), '0.bias': torch.ones(4),
            'head.weight': torch.ones(2, 4)
        })
    with pytest.raises(CheckpointMismatch) as err:
        CheckpointFitHook('other.pth').after_load_checkpoint(
            FakeRunner(model), state)
    message = str(err.value)
    assert message.startswith('other.pth does not fit the model')
    assert '2 model weights it does not hold (1.weight; 1.bias)' in message
    assert '1 keys the model does not have (head.weight)' in message
    assert '--allow-partial' in message
    runner = FakeRunner(model)
    CheckpointFitHook('other.pth',
                      allow_partial=True).after_load_checkpoint(runner, state)
    assert 'only partly' in runner.warnings[0]


def test_tools_load_only_fitting_weights(tmp_path):
    # What the analysis tools load with: a fitting checkpoint (Runner
    # layout, DDP prefix) loads every weight; one of another width is
    # refused naming the file, where mmengine would keep random weights.
    narrow = nn.Sequential(nn.Linear(3, 4), nn.Linear(4, 2))
    path = str(tmp_path / 'narrow.pth')
    torch.save(
        dict(state_dict={
            f'module.{k}': v
            for k, v in narrow.state_dict().items()
        }), path)
    same = nn.Sequential(nn.Linear(3, 4), nn.Linear(4, 2))
    load_fitting_weights(same, path)
    for a, b in zip(same.parameters(), narrow.parameters()):
        assert torch.equal(a, b)
    wide = nn.Sequential(nn.Linear(3, 8), nn.Linear(8, 2))
    before = [p.clone() for p in wide.parameters()]
    with pytest.raises(CheckpointMismatch) as err:
        load_fitting_weights(wide, path)
    message = str(err.value)
    assert message.startswith(f'{path} does not fit the model')
    assert '0.weight: (4, 3) in the checkpoint vs (8, 3) in the model' \
        in message
    assert all(torch.equal(a, b) for a, b in zip(wide.parameters(), before))
    torch.save([1, 2], path)
    with pytest.raises(CheckpointMismatch, match='holds no state dict'):
        load_fitting_weights(same, path)


def test_resume_with_a_changed_model_fails_before_the_optimizer(tmp_path):
    run = make_runner(tmp_path / 'run', max_iters=3)
    run.train()
    ckpt = str(tmp_path / 'run' / 'iter_3.pth')
    changed = make_runner(tmp_path / 'changed', max_iters=6, resume_from=ckpt)
    changed.model.net[0] = nn.Linear(3, 16)  # a wider layer
    changed.model.net[2] = nn.Linear(16, 1)
    changed.register_hook(CheckpointFitHook(ckpt, 'resume'))
    with pytest.raises(CheckpointMismatch) as err:
        changed.train()
    message = str(err.value)
    assert f'cannot resume from {ckpt}' in message
    assert 'net.0.weight: (8, 3) in the checkpoint vs (16, 3)' in message
    assert 'load_from=' in message
    assert changed.iter == 0  # nothing trained, nothing saved
    assert not list((tmp_path / 'changed').glob('*.pth'))


def caps_layer():
    return HGWCaps(8, 8, in_types=2, out_types=2, num_parts=2, part_dim=2,
                   padding=1)


@pytest.mark.parametrize('beta', [1.5, -0.1, math.nan, math.inf])
def test_capsule_beta_out_of_range_is_refused_naming_the_key(beta):
    holder = nn.Sequential(caps_layer())
    state = holder.state_dict()
    state['0.beta'] = torch.tensor(beta)
    with pytest.raises(
            ValueError, match=r"checkpoint key '0\.beta' must be "
            r"in \[0, 1\], got ") as err:
        holder.load_state_dict(state)
    assert "capsule layer's beta; the checkpoint is corrupt" in str(err.value)


def test_capsule_beta_checked_on_mmengine_loading_paths(tmp_path):
    from mmengine.model import BaseModule
    from mmengine.runner import load_checkpoint
    state = nn.Sequential(caps_layer()).state_dict()
    state['0.beta'] = torch.tensor(2.0)
    path = str(tmp_path / 'bad_beta.pth')
    torch.save(dict(state_dict=state, meta={}), path)
    with pytest.raises(ValueError, match="'0.beta'"):
        load_checkpoint(nn.Sequential(caps_layer()), path, logger='silent')

    class Pretrained(BaseModule):

        def __init__(self):
            super().__init__(init_cfg=dict(type='Pretrained', checkpoint=path))
            self.caps = nn.Sequential(caps_layer())

    # init_cfg Pretrained loads the whole module: the key is 'caps.0.beta'
    torch.save(dict(state_dict={f'caps.{k}': v
                                for k, v in state.items()}), path)
    with pytest.raises(ValueError, match="'caps.0.beta'"):
        Pretrained().init_weights()


def test_capsule_beta_in_range_loads():
    holder = nn.Sequential(caps_layer())
    state = holder.state_dict()
    state['0.beta'] = torch.tensor(1.0)
    holder.load_state_dict(state)
    assert holder[0].beta.item() == 1.0


def test_runner_load_refuses_bad_beta(tmp_path):
    runner = make_runner(tmp_path / 'run', max_iters=1)
    runner.model.caps = caps_layer()
    state = runner.model.state_dict()
    state['caps.beta'] = torch.tensor(-1.0)
    torch.save(dict(state_dict=state, meta={}), tmp_path / 'c.pth')
    with pytest.raises(ValueError, match="'caps.beta'"):
        Runner.load_checkpoint(runner, str(tmp_path / 'c.pth'))
