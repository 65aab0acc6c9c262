"""A diverging run stops, naming the iteration, before it writes a
non-finite checkpoint (NonFiniteGuardHook)."""
import math
import os.path as osp
import re

import pytest
import torch
import torch.nn as nn
from mmengine.model import BaseModel
from mmengine.runner import Runner
from torch.utils.data import Dataset

import mmhgw  # noqa: F401
from mmhgw.engine.hooks import NonFiniteGuardHook


class Regressor(BaseModel):

    def __init__(self):
        super().__init__()
        self.net = nn.Linear(3, 1)
        self.register_buffer('scale', torch.ones(1))

    def forward(self, x, y, mode='tensor'):
        out = self.net(x) * self.scale
        if mode == 'loss':
            return dict(loss=((out - y)**2).mean())
        return out


class Data(Dataset):

    def __len__(self):
        return 16

    def __getitem__(self, i):
        x = torch.randn(3, generator=torch.Generator().manual_seed(i)) * 10
        return dict(x=x, y=x.sum(0, keepdim=True))


def make_runner(work_dir, lr, hooks=(dict(type='NonFiniteGuardHook'), ),
                max_iters=12):
    return Runner(
        model=Regressor(), work_dir=str(work_dir), train_dataloader=dict(
            dataset=Data(), sampler=dict(type='InfiniteSampler', shuffle=True,
                                         seed=0), batch_size=4,
            collate_fn=dict(type='default_collate')),
        optim_wrapper=dict(optimizer=dict(type='SGD', lr=lr)),
        train_cfg=dict(by_epoch=False, max_iters=max_iters),
        default_hooks=dict(checkpoint=dict(type='CheckpointHook', interval=2,
                                           by_epoch=False)),
        custom_hooks=list(hooks), randomness=dict(seed=0),
        experiment_name=f'{osp.basename(work_dir)}_{lr}')


def test_guard_runs_before_the_checkpoint_hook(tmp_path):
    runner = make_runner(tmp_path / 'order', lr=0.01)
    names = [type(h).__name__ for h in runner.hooks]
    assert names.index('NonFiniteGuardHook') < names.index('CheckpointHook')


def test_diverging_run_stops_before_a_nan_checkpoint(tmp_path):
    work = tmp_path / 'diverge'
    runner = make_runner(work, lr=1.0)
    with pytest.raises(RuntimeError,
                       match='non-finite loss at iteration') as err:
        runner.train()
    failed = int(re.search(r'iteration (\d+)', str(err.value)).group(1))
    assert 2 < failed < 12, str(err.value)  # checkpoints were due before
    saved = sorted(int(p.stem.split('_')[1]) for p in work.glob('iter_*.pth'))
    assert saved and max(saved) < failed
    # last_checkpoint names a finite checkpoint, the one --resume loads.
    last = (work / 'last_checkpoint').read_text().strip()
    assert last.endswith(f'iter_{max(saved)}.pth')
    state = torch.load(last)['state_dict']
    assert all(torch.isfinite(v).all() for v in state.values())
    # The same run without the guard goes on and saves non-finite weights.
    unguarded = make_runner(tmp_path / 'unguarded', lr=1.0, hooks=(),
                            max_iters=20)
    unguarded.train()
    final = torch.load(tmp_path / 'unguarded' / 'iter_20.pth')['state_dict']
    assert not all(torch.isfinite(v).all() for v in final.values())


class FakeRunner:
    iter, epoch, max_epochs = 6, 0, 1

    def __init__(self, model=None):
        self.model = model


def test_non_finite_checkpoint_is_refused_naming_the_tensors():
    hook = NonFiniteGuardHook()
    checkpoint = dict(
        state_dict={
            'net.weight': torch.ones(2), 'scale': torch.tensor([math.nan])
        }, optimizer=dict(state={0: dict(momentum_buffer=torch.ones(2))}))
    with pytest.raises(RuntimeError, match=r'state_dict .*iteration 7.*scale'):
        hook.before_save_checkpoint(FakeRunner(), checkpoint)
    checkpoint['state_dict']['scale'] = torch.ones(1)
    checkpoint['optimizer']['state'][0]['momentum_buffer'][1] = math.inf
    with pytest.raises(RuntimeError,
                       match='optimizer .*state.0.momentum_buffer'):
        hook.before_save_checkpoint(FakeRunner(), checkpoint)


def test_weights_checked_every_param_interval():
    model = Regressor()
    model.scale.fill_(math.nan)
    hook = NonFiniteGuardHook(param_interval=7)
    # Iteration 7 (runner.iter 6) is checked, with a finite loss.
    with pytest.raises(RuntimeError, match='weights after iteration 7: scale'):
        hook.after_train_iter(FakeRunner(model), 6,
                              outputs=dict(loss=torch.tensor(1.0)))
    runner = FakeRunner(model)
    runner.iter = 5
    hook.after_train_iter(runner, 5, outputs=dict(loss=torch.tensor(1.0)))
    with pytest.raises(ValueError, match='param_interval'):
        NonFiniteGuardHook(param_interval=-1)


def test_loss_terms_are_named():
    hook = NonFiniteGuardHook()
    outputs = dict(loss=torch.tensor(math.nan), loss_cls=torch.tensor(0.5),
                   loss_bbox=torch.tensor(math.inf), acc=torch.tensor(1.0))
    with pytest.raises(RuntimeError, match='loss=nan, loss_bbox=inf'):
        hook.after_train_iter(FakeRunner(), 6, outputs=outputs)


def test_loading_a_non_finite_checkpoint_is_refused():
    hook = NonFiniteGuardHook()
    with pytest.raises(RuntimeError, match='iteration 8.*non-finite.*w'):
        hook.after_load_checkpoint(
            FakeRunner(),
            dict(meta=dict(iter=8, epoch=0),
                 state_dict={'w': torch.tensor([1.0, math.nan])}))
    hook.after_load_checkpoint(
        FakeRunner(), dict(meta=dict(iter=8), state_dict={'w': torch.ones(2)}))
