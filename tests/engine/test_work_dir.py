"""Work-dir safety: one live run per work dir (stale locks taken over, one
lock per distributed launch) and resume that finds its checkpoint or
refuses, naming what it looked for."""
import os
import os.path as osp
import shutil
import signal
import subprocess
import sys
import time

import pytest
from mmengine.config import Config

from mmhgw.engine.work_dir import (LOCK_NAME, WorkDirError, WorkDirLock,
                                   claim_work_dir, latest_checkpoint,
                                   launch_rank, resume_checkpoint)

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
HOLDER = ('import sys, time\n'
          'from mmhgw.engine.work_dir import WorkDirLock\n'
          'WorkDirLock(sys.argv[1]).acquire()\n'
          'print("locked", flush=True)\n'
          'time.sleep(120)\n')


def hold_lock(work_dir):
    """A process holding ``work_dir``'s lock (it prints once it does)."""
    proc = subprocess.Popen([sys.executable, '-c', HOLDER,
                             str(work_dir)], cwd=ROOT, stdout=subprocess.PIPE,
                            text=True)
    assert proc.stdout.readline().strip() == 'locked'
    return proc


def test_second_run_refused_while_the_first_lives(tmp_path):
    holder = hold_lock(tmp_path)
    try:
        with pytest.raises(WorkDirError) as err:
            WorkDirLock(tmp_path).acquire()
        message = str(err.value)
        assert f'pid {holder.pid}' in message
        assert str(tmp_path / LOCK_NAME) in message
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    # Killed without cleaning up: its lock file stays and is taken over.
    assert (tmp_path / LOCK_NAME).exists()
    lock = WorkDirLock(tmp_path).acquire()
    assert f'"pid": {os.getpid()}' in (tmp_path / LOCK_NAME).read_text()
    lock.release()
    assert not (tmp_path / LOCK_NAME).exists()


def test_record_of_a_dead_process_is_taken_over(tmp_path):
    (tmp_path / LOCK_NAME).write_text(
        '{"pid": 999999999, "host": "elsewhere", "started": "earlier"}')
    lock = WorkDirLock(tmp_path).acquire()
    with pytest.raises(WorkDirError, match=f'pid {os.getpid()}'):
        WorkDirLock(tmp_path).acquire()  # another open file: refused
    lock.release()


def test_rank_from_the_launcher_environment():
    assert launch_rank('none', {'RANK': '3'}) == 0
    assert launch_rank('pytorch', {'RANK': '3'}) == 3
    assert launch_rank('slurm', {'SLURM_PROCID': '2', 'RANK': '5'}) == 2
    assert launch_rank('mpi', {'OMPI_COMM_WORLD_RANK': '1'}) == 1
    assert launch_rank('pytorch', {}) == 0


def config(work_dir, **kwargs):
    return Config(dict(work_dir=str(work_dir), **kwargs))


def test_only_rank_zero_of_a_launch_locks(tmp_path, monkeypatch):
    holder = hold_lock(tmp_path)
    try:
        monkeypatch.setenv('RANK', '1')
        assert claim_work_dir(config(tmp_path, launcher='pytorch')) is None
        monkeypatch.setenv('RANK', '0')
        with pytest.raises(WorkDirError, match='in use'):
            claim_work_dir(config(tmp_path, launcher='pytorch'))
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()


def write_run(work_dir, names=('iter_2.pth', 'iter_4.pth'), last=None):
    os.makedirs(work_dir, exist_ok=True)
    for name in names:
        (work_dir / name).write_bytes(b'checkpoint ' + name.encode())
        time.sleep(0.01)  # distinct modification times
    if last is not None:
        (work_dir / 'last_checkpoint').write_text(last)


def test_missing_last_checkpoint_is_refused_naming_what_is_there(tmp_path):
    write_run(tmp_path)
    with pytest.raises(WorkDirError) as err:
        resume_checkpoint(tmp_path)
    message = str(err.value)
    assert f'{tmp_path}/last_checkpoint does not exist' in message
    assert 'iter_4.pth, iter_2.pth' in message  # newest first
    assert '--start-fresh' in message and '--resume PATH' in message


def test_tools_reading_the_latest_checkpoint_get_the_same_rules(tmp_path):
    write_run(tmp_path / 'a', last=str(tmp_path / 'gone' / 'iter_4.pth'))
    assert latest_checkpoint(tmp_path / 'a') == \
        str(tmp_path / 'a' / 'iter_4.pth')
    with pytest.raises(WorkDirError) as err:
        latest_checkpoint(tmp_path / 'b')
    assert 'last_checkpoint does not exist' in str(err.value)
    assert '--start-fresh' not in str(err.value)  # resume advice only


@pytest.mark.parametrize('content', ['', '  \n'])
def test_empty_last_checkpoint_is_named(tmp_path, content):
    write_run(tmp_path, last=content)
    with pytest.raises(WorkDirError,
                       match=f'{tmp_path}/last_checkpoint is empty'):
        resume_checkpoint(tmp_path)


def test_copied_work_dir_resumes_from_its_own_files(tmp_path):
    original = tmp_path / 'original'
    write_run(original, last=str(original / 'iter_4.pth'))
    copy = tmp_path / 'copy'
    shutil.copytree(original, copy)
    # The original still exists; the copy's own file is taken.
    assert resume_checkpoint(copy) == str(copy / 'iter_4.pth')
    shutil.rmtree(original)
    assert resume_checkpoint(copy) == str(copy / 'iter_4.pth')


def test_relative_and_outside_stored_paths(tmp_path):
    write_run(tmp_path / 'run', last='iter_2.pth')
    assert resume_checkpoint(tmp_path / 'run') == \
        str(tmp_path / 'run' / 'iter_2.pth')
    # CheckpointHook(out_dir=...) saves elsewhere: the stored path is used.
    write_run(tmp_path / 'out', names=['iter_6.pth'])
    write_run(tmp_path / 'run2', names=[],
              last=str(tmp_path / 'out' / 'iter_6.pth'))
    assert resume_checkpoint(tmp_path / 'run2') == \
        str(tmp_path / 'out' / 'iter_6.pth')


def test_stored_path_gone_everywhere_is_refused(tmp_path):
    write_run(tmp_path, names=['iter_2.pth'], last='/gone/run/iter_8.pth')
    with pytest.raises(WorkDirError) as err:
        resume_checkpoint(tmp_path)
    assert '/gone/run/iter_8.pth, which does not exist' in str(err.value)
    assert str(tmp_path / 'iter_8.pth') in str(err.value)
    assert 'holds iter_2.pth' in str(err.value)


def test_claim_resolves_or_starts_fresh_only_when_told(tmp_path):
    write_run(tmp_path / 'a', last=str(tmp_path / 'a' / 'iter_4.pth'))
    cfg = config(tmp_path / 'a', resume=False, load_from=None)
    claim_work_dir(cfg, 'auto').release()
    assert cfg.resume and cfg.load_from == str(tmp_path / 'a' / 'iter_4.pth')

    cfg = config(tmp_path / 'b', resume=False, load_from=None)
    with pytest.raises(WorkDirError, match='nothing to resume'):
        claim_work_dir(cfg, 'auto')
    claim_work_dir(cfg, 'auto', start_fresh=True).release()
    assert not cfg.resume and cfg.load_from is None

    # resume=True in the config itself follows the same rules.
    cfg = config(tmp_path / 'c', resume=True, load_from=None)
    with pytest.raises(WorkDirError, match='nothing to resume'):
        claim_work_dir(cfg)
    cfg = config(tmp_path / 'd', resume=False, load_from=None)
    with pytest.raises(WorkDirError, match='missing.pth does not exist'):
        claim_work_dir(cfg, str(tmp_path / 'missing.pth'))
