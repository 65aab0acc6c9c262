"""mmengine Runner checkpoints save and resume with torch's weights_only
loading kept on, through an exact allow-list."""
import pickle

import pytest
import torch
import torch.nn as nn
from mmengine.model import BaseModel
from mmengine.runner import Runner
from torch.utils.data import Dataset

import mmhgw  # noqa: F401  (allow-lists the checkpoint globals)
from mmhgw.engine.checkpoint import history_buffer_getattr


class TinyRegressor(BaseModel):

    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(3, 8), nn.ReLU(), nn.Linear(8, 1))

    def forward(self, x, y, mode='tensor'):
        out = self.net(x)
        if mode == 'loss':
            return dict(loss=((out - y)**2).mean())
        return out


class LinearData(Dataset):

    def __len__(self):
        return 32

    def __getitem__(self, i):
        x = torch.randn(3, generator=torch.Generator().manual_seed(i))
        return dict(x=x, y=x.sum(0, keepdim=True))


def make_runner(work_dir, max_iters, resume_from=None):
    return Runner(
        model=TinyRegressor(),
        work_dir=str(work_dir),
        train_dataloader=dict(
            dataset=LinearData(),
            sampler=dict(type='InfiniteSampler', shuffle=True, seed=0),
            batch_size=4,
            collate_fn=dict(type='default_collate')),
        optim_wrapper=dict(
            optimizer=dict(type='SGD', lr=0.05, momentum=0.9)),
        param_scheduler=dict(type='MultiStepLR', milestones=[3],
                             by_epoch=False),
        train_cfg=dict(by_epoch=False, max_iters=max_iters),
        default_hooks=dict(
            checkpoint=dict(type='CheckpointHook', interval=3,
                            by_epoch=False),
            logger=dict(type='LoggerHook', interval=1)),
        randomness=dict(seed=0, deterministic=True),
        resume=resume_from is not None,
        load_from=resume_from,
        experiment_name=f'run{max_iters}{resume_from is not None}')


def test_runner_checkpoint_resumes_with_weights_only(tmp_path):
    straight = make_runner(tmp_path / 'straight', max_iters=6)
    straight.train()
    ckpt = tmp_path / 'straight' / 'iter_3.pth'
    # torch's default (weights_only=True) loads the whole Runner checkpoint.
    state = torch.load(ckpt)
    assert state['meta']['iter'] == 3
    assert 'message_hub' in state and 'optimizer' in state

    resumed = make_runner(tmp_path / 'resumed', max_iters=6,
                          resume_from=str(ckpt))
    resumed.train()
    assert resumed.iter == 6
    a = straight.model.state_dict()
    b = resumed.model.state_dict()
    for key in a:
        torch.testing.assert_close(a[key], b[key])
    opt_a = straight.optim_wrapper.optimizer.state_dict()['state']
    opt_b = resumed.optim_wrapper.optimizer.state_dict()['state']
    for key in opt_a:
        torch.testing.assert_close(opt_a[key]['momentum_buffer'],
                                   opt_b[key]['momentum_buffer'])


def test_getattr_stand_in_resolves_only_history_buffer_methods():
    from mmengine.logging.history_buffer import HistoryBuffer
    assert history_buffer_getattr(HistoryBuffer, 'mean') is HistoryBuffer.mean
    with pytest.raises(pickle.UnpicklingError, match='refusing'):
        history_buffer_getattr(HistoryBuffer, '__init__')
    import os
    with pytest.raises(pickle.UnpicklingError, match='refusing'):
        history_buffer_getattr(os, 'system')


def test_unlisted_globals_stay_refused(tmp_path):
    path = tmp_path / 'evil.pth'
    torch.save({'f': pickle.dumps}, path)
    with pytest.raises(pickle.UnpicklingError):
        torch.load(path)
