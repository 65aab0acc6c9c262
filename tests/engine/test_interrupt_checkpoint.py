"""An interrupted run (Ctrl-C, SIGTERM) saves the iteration it stopped after
and resumes from it: InterruptCheckpointHook."""
import os
import os.path as osp
import signal
import subprocess
import sys

import pytest
import torch
import torch.nn as nn
from mmengine.hooks import Hook
from mmengine.model import BaseModel
from mmengine.runner import Runner

from mmhgw.engine.hooks import InterruptCheckpointHook

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))


class ToyModel(BaseModel):

    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(2, 1)

    def forward(self, inputs, targets=None, mode='loss'):
        out = self.linear(inputs)
        if mode == 'loss':
            return dict(loss=(out - targets).pow(2).mean())
        return out


class ToyData(torch.utils.data.Dataset):

    def __len__(self):
        return 4

    def __getitem__(self, i):
        x = torch.tensor([float(i), 1.0 - i])
        return dict(inputs=x, targets=x.sum(0, keepdim=True) * 0.5)


@pytest.fixture(autouse=True)
def stock_handlers():
    """Each test starts from Python's own handlers, whatever the process
    was started with (a background job ignores SIGINT)."""
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    yield
    for signum, handler in before.items():
        signal.signal(signum, handler)


class SignalAt(Hook):
    """Sends ``signum`` to this process after iteration ``at`` (from 1)."""
    priority = 'NORMAL'

    def __init__(self, at, signum=signal.SIGTERM):
        self.at, self.signum = at, signum

    def after_train_iter(self, runner, batch_idx, data_batch=None,
                         outputs=None):
        if runner.iter + 1 == self.at:
            # Without the hook's handler the signal would end pytest itself.
            handler = signal.getsignal(self.signum)
            assert isinstance(getattr(handler, '__self__', None),
                              InterruptCheckpointHook), handler
            os.kill(os.getpid(), self.signum)


def toy_runner(work_dir, by_epoch=False, length=8, hooks=(), resume=None,
               interval=100):
    torch.manual_seed(0)  # the same initial weights in every run
    train_cfg = (dict(by_epoch=True, max_epochs=length) if by_epoch else dict(
        by_epoch=False, max_iters=length))
    return Runner(
        model=ToyModel(), work_dir=str(work_dir),
        experiment_name=f'{osp.basename(work_dir)}_{length}_{resume}',
        train_dataloader=dict(
            dataset=ToyData(), batch_size=1,
            collate_fn=dict(type='default_collate'), sampler=dict(
                type='InfiniteSampler' if not by_epoch else 'DefaultSampler',
                shuffle=False)), train_cfg=train_cfg,
        optim_wrapper=dict(optimizer=dict(type='SGD', lr=0.1)),
        default_hooks=dict(
            checkpoint=dict(type='CheckpointHook', interval=interval,
                            by_epoch=by_epoch),
            logger=None), custom_hooks=[InterruptCheckpointHook(), *hooks],
        resume=resume is not None, load_from=resume, default_scope='mmengine')


def last_checkpoint(work_dir):
    with open(osp.join(work_dir, 'last_checkpoint')) as f:
        return f.read().strip()


def weights(runner):
    return {k: v.clone() for k, v in runner.model.state_dict().items()}


@pytest.mark.parametrize('signum', [signal.SIGTERM, signal.SIGINT])
def test_interrupted_iteration_run_resumes_exactly(tmp_path, signum):
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    runner = toy_runner(tmp_path / 'split', hooks=[SignalAt(3, signum)])
    with pytest.raises(SystemExit) as stop:
        runner.train()
    assert stop.value.code == 128 + signum
    # The handlers are the stock ones again.
    assert {s: signal.getsignal(s) for s in before} == before
    saved = last_checkpoint(tmp_path / 'split')
    assert osp.basename(saved) == 'iter_3.pth'
    assert torch.load(saved)['meta']['iter'] == 3
    torch.testing.assert_close(
        torch.load(saved)['state_dict'], weights(runner))

    resumed = toy_runner(tmp_path / 'split', resume=saved)
    resumed.train()
    straight = toy_runner(tmp_path / 'straight')
    straight.train()
    assert resumed.iter == straight.iter == 8
    for key, value in weights(straight).items():
        torch.testing.assert_close(
            weights(resumed)[key], value, rtol=0, atol=0)


def test_a_periodic_checkpoint_of_that_iteration_is_not_written_twice(
        tmp_path, monkeypatch):
    saves = []
    original = Runner.save_checkpoint

    def counted(self, out_dir, filename, *args, **kwargs):
        saves.append(filename)
        return original(self, out_dir, filename, *args, **kwargs)

    monkeypatch.setattr(Runner, 'save_checkpoint', counted)
    runner = toy_runner(tmp_path, hooks=[SignalAt(4)], interval=2)
    with pytest.raises(SystemExit):
        runner.train()
    assert saves == ['iter_2.pth', 'iter_4.pth']
    assert osp.basename(last_checkpoint(tmp_path)) == 'iter_4.pth'


def test_interrupted_epoch_run_repeats_the_epoch_from_its_start(tmp_path):
    # Four iterations an epoch; stopped at the second of epoch 2.
    runner = toy_runner(tmp_path, by_epoch=True, length=3, hooks=[SignalAt(6)])
    with pytest.raises(SystemExit):
        runner.train()
    saved = last_checkpoint(tmp_path)
    assert osp.basename(saved) == 'epoch_2_iter_6.pth'
    meta = torch.load(saved)['meta']
    assert (meta['epoch'], meta['iter']) == (1, 6)
    resumed = toy_runner(tmp_path, by_epoch=True, length=3, resume=saved)
    resumed.train()
    assert (resumed.epoch, resumed.iter) == (3, 6 + 2 * 4)


def test_a_run_without_a_signal_ends_as_before(tmp_path):
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    runner = toy_runner(tmp_path, length=3)
    runner.train()
    assert runner.iter == 3
    assert {s: signal.getsignal(s) for s in before} == before
    # The stock save of the last iteration, nothing more.
    assert sorted(f for f in os.listdir(tmp_path)
                  if f.endswith('.pth')) == ['iter_3.pth']


def test_train_tool_saves_on_sigterm_and_resumes(tmp_path, reduced_seg_config):
    """The user's path: tools/train.py, SIGTERM during training, exit 143
    with a checkpoint, then --resume finishes the run."""
    config = str(reduced_seg_config(tmp_path, num_train=4, num_val=2))
    work = tmp_path / 'work'
    options = [
        '--cfg-options', 'train_cfg.max_iters=200',
        'train_cfg.val_interval=1000', 'default_hooks.checkpoint.interval=1000'
    ]
    env = dict(os.environ, PYTHONUNBUFFERED='1')
    proc = subprocess.Popen([
        sys.executable, 'tools/train.py', config, '--work-dir',
        str(work), *options
    ], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    log = []
    for line in proc.stdout:
        log.append(line)
        if 'Iter(train) [  2/200]' in line:
            proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=300) == 128 + signal.SIGTERM, ''.join(log)[-3000:]
    saved = last_checkpoint(work)
    stopped_at = torch.load(saved)['meta']['iter']
    assert 2 <= stopped_at < 200
    assert osp.basename(saved) == f'iter_{stopped_at}.pth'
    assert 'SIGTERM' in ''.join(log)
    done = subprocess.run([
        sys.executable, 'tools/train.py', config, '--work-dir',
        str(work), '--resume', *options[:1],
        f'train_cfg.max_iters={stopped_at + 1}', *options[2:]
    ], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert osp.basename(last_checkpoint(work)) == f'iter_{stopped_at + 1}.pth'


def test_handlers_left_by_a_failed_run_act_as_before(tmp_path):
    """A run that ends in an error skips after_train; a later Ctrl-C must
    still interrupt, not wait for an iteration that never comes."""

    class Fail(Hook):

        def after_train_iter(self, runner, batch_idx, data_batch=None,
                             outputs=None):
            raise RuntimeError('diverged')

    runner = toy_runner(tmp_path, hooks=[Fail()])
    with pytest.raises(RuntimeError, match='diverged'):
        runner.train()
    with pytest.raises(KeyboardInterrupt):
        os.kill(os.getpid(), signal.SIGINT)
        for _ in range(100):  # the handler runs between bytecodes
            pass
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_the_other_stop_signal_asks_for_the_same_stop(tmp_path):
    """Ctrl-C, then the launcher's SIGTERM in the same iteration: one
    checkpoint, the first signal's exit status; a second Ctrl-C would
    have found the stock handler."""

    class Both(SignalAt):

        def after_train_iter(self, runner, batch_idx, data_batch=None,
                             outputs=None):
            super().after_train_iter(runner, batch_idx, data_batch, outputs)
            if runner.iter + 1 == self.at:
                assert signal.getsignal(signal.SIGINT) is \
                    signal.default_int_handler
                os.kill(os.getpid(), signal.SIGTERM)

    runner = toy_runner(tmp_path, hooks=[Both(2, signal.SIGINT)])
    with pytest.raises(SystemExit) as stop:
        runner.train()
    assert stop.value.code == 128 + signal.SIGINT
    assert osp.basename(last_checkpoint(tmp_path)) == 'iter_2.pth'
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


def test_a_signal_ignored_before_the_run_stays_ignored(tmp_path):
    """Started with SIGINT ignored (nohup, a script's background job), the
    run goes on through a Ctrl-C; SIGTERM still stops it with a checkpoint,
    and SIGINT is ignored again afterwards."""

    class IgnoredThenTerm(Hook):
        priority = 'NORMAL'

        def after_train_iter(self, runner, batch_idx, data_batch=None,
                             outputs=None):
            if runner.iter + 1 == 1:
                assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
                os.kill(os.getpid(), signal.SIGINT)
            if runner.iter + 1 == 3:
                os.kill(os.getpid(), signal.SIGTERM)

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    runner = toy_runner(tmp_path, hooks=[IgnoredThenTerm()])
    with pytest.raises(SystemExit) as stop:
        runner.train()
    assert stop.value.code == 128 + signal.SIGTERM
    assert osp.basename(last_checkpoint(tmp_path)) == 'iter_3.pth'
    assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
