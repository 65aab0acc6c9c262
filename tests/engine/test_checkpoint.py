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
        model=TinyRegressor(), work_dir=str(work_dir), train_dataloader=dict(
            dataset=LinearData(), sampler=dict(type='InfiniteSampler',
                                               shuffle=True, seed=0),
            batch_size=4, collate_fn=dict(type='default_collate')),
        optim_wrapper=dict(optimizer=dict(type='SGD', lr=0.05, momentum=0.9)),
        param_scheduler=dict(type='MultiStepLR', milestones=[3],
                             by_epoch=False),
        train_cfg=dict(by_epoch=False,
                       max_iters=max_iters), default_hooks=dict(
                           checkpoint=dict(type='CheckpointHook', interval=3,
                                           by_epoch=False),
                           logger=dict(type='LoggerHook', interval=1)),
        randomness=dict(seed=0, deterministic=True), resume=resume_from
        is not None, load_from=resume_from,
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


def crafted_history_buffer_file(path, monkeypatch, **extra):
    """A checkpoint whose HistoryBuffer state carries ``extra`` entries."""
    from mmengine.logging.history_buffer import HistoryBuffer
    buf = HistoryBuffer([1.0, 3.0], [1, 1])
    state = dict(buf.__getstate__(), **extra)
    with monkeypatch.context() as m:
        m.setattr(HistoryBuffer, '__getstate__', lambda self: state)
        torch.save({'message_hub': {'log_scalars': {'train/loss': buf}}}, path)


@pytest.mark.parametrize('extra',
                         ['swap_methods', 'shadow_table', 'foreign_attribute'])
def test_crafted_history_buffer_cannot_rewrite_statistics(
        tmp_path, monkeypatch, extra):
    from mmengine.logging.history_buffer import HistoryBuffer
    HistoryBuffer()  # registers the default statistics
    table = dict(HistoryBuffer._statistics_methods)
    kwargs = dict(
        swap_methods=dict(statistics_methods=dict(mean=HistoryBuffer.max,
                                                  current=HistoryBuffer.min)),
        shadow_table=dict(_statistics_methods=dict(mean=HistoryBuffer.max)),
        foreign_attribute=dict(update=HistoryBuffer.max))[extra]
    path = tmp_path / 'crafted.pth'
    crafted_history_buffer_file(path, monkeypatch, **kwargs)
    try:
        with pytest.raises(pickle.UnpicklingError, match='refusing'):
            torch.load(path)
        assert HistoryBuffer._statistics_methods == table
        fresh = HistoryBuffer([1.0, 3.0], [1, 1])
        assert fresh.mean() == 2.0 and fresh.statistics('mean') == 2.0
    finally:  # never leave a poisoned table behind for other tests
        HistoryBuffer._statistics_methods.clear()
        HistoryBuffer._statistics_methods.update(table)


def test_genuine_history_buffer_loads_as_itself(tmp_path):
    from mmengine.logging.history_buffer import HistoryBuffer
    buf = HistoryBuffer([1.0, 3.0, 8.0], [1, 1, 1], max_length=7)
    torch.save({'b': buf}, tmp_path / 'hub.pth')
    loaded = torch.load(tmp_path / 'hub.pth')['b']
    assert type(loaded) is HistoryBuffer
    assert loaded.max_length == 7
    assert loaded.mean() == 4.0 and loaded.statistics('max') == 8.0


@pytest.mark.parametrize(
    'content,what', [(b'', 'is empty'), (b'not a checkpoint\n', 'text file'),
                     (b'PK\x03\x04' + b'\x00' * 20, 'truncated or corrupt')])
def test_unreadable_checkpoint_names_the_file(tmp_path, content, what):
    from mmengine.runner import load_checkpoint
    path = tmp_path / 'epoch_3.pth'
    path.write_bytes(content)
    with pytest.raises(RuntimeError, match=f'epoch_3.pth.*{what}'):
        load_checkpoint(nn.Linear(2, 2), str(path), logger='silent')
    runner = make_runner(tmp_path / 'run', max_iters=1)
    with pytest.raises(RuntimeError, match=f'epoch_3.pth.*{what}'):
        runner.load_checkpoint(str(path))
