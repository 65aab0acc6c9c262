"""tools/train.py and tools/test.py under faults and bad input: nothing is
overwritten without being asked, no metric is printed for a model whose
weights did not load, and errors name the file, key or argument."""
import os
import os.path as osp
import subprocess
import sys

import pytest
import torch

from mmhgw.config_utils import build_config_model, load_offline_config
from mmhgw.engine.work_dir import WorkDirLock

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))


def run_tool(*args, timeout=600):
    return subprocess.run([sys.executable, *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope='module')
def config(tmp_path_factory):
    from conftest import write_reduced_seg_config
    return str(
        write_reduced_seg_config(tmp_path_factory.mktemp('faults'),
                                 num_train=2, num_val=2))


def test_resume_without_last_checkpoint_refuses_and_keeps_files(
        tmp_path, config):
    work = tmp_path / 'work'
    work.mkdir()
    kept = work / 'iter_2.pth'
    kept.write_bytes(b'an earlier run')
    done = run_tool('tools/train.py', config, '--work-dir', str(work),
                    '--resume')
    assert done.returncode != 0
    assert f'{work}/last_checkpoint does not exist' in done.stderr
    assert 'holds iter_2.pth' in done.stderr
    assert kept.read_bytes() == b'an earlier run'
    assert sorted(os.listdir(work)) == ['iter_2.pth']  # no log, no lock


def test_second_run_in_a_live_work_dir_refuses(tmp_path, config):
    lock = WorkDirLock(tmp_path).acquire()
    try:
        done = run_tool('tools/train.py', config, '--work-dir', str(tmp_path))
    finally:
        lock.release()
    assert done.returncode != 0
    assert f'in use by another training run (pid {os.getpid()}' \
        in done.stderr


def test_start_fresh_needs_resume(monkeypatch, capsys):
    from tools.train import parse_args
    monkeypatch.setattr(sys, 'argv', ['train.py', 'c.py', '--start-fresh'])
    with pytest.raises(SystemExit) as exit_:
        parse_args()
    assert exit_.value.code == 2
    assert '--start-fresh applies to --resume only' in capsys.readouterr().err
    monkeypatch.setattr(sys, 'argv',
                        ['train.py', 'c.py', '--resume', '--start-fresh'])
    assert parse_args().start_fresh


def test_amp_without_a_device_for_it_is_refused(monkeypatch, capsys):
    import tools.train
    monkeypatch.setattr(tools.train, 'amp_device_available', lambda: False)
    monkeypatch.setattr(sys, 'argv', ['train.py', 'c.py', '--amp'])
    with pytest.raises(SystemExit) as exit_:
        tools.train.parse_args()
    assert exit_.value.code == 2
    assert "--amp trains through mmengine's AmpOptimWrapper, which needs a " \
        'GPU' in capsys.readouterr().err
    monkeypatch.setattr(tools.train, 'amp_device_available', lambda: True)
    assert tools.train.parse_args().amp


@pytest.mark.skipif(torch.cuda.is_available(), reason='a CPU-only machine')
def test_amp_device_check_on_a_cpu_only_machine():
    from tools.train import amp_device_available
    assert amp_device_available() is False


@pytest.mark.parametrize('tool', ['train', 'test'])
def test_type_typo_refused_before_the_runner(tmp_path, config, tool):
    args = [
        '--work-dir',
        str(tmp_path), '--cfg-options', 'model.backbone.hgw_cfg.type=HGWCap'
    ]
    if tool == 'test':
        args.insert(0, str(tmp_path / 'none.pth'))
    done = run_tool(f'tools/{tool}.py', config, *args)
    assert done.returncode != 0
    assert "model.backbone.hgw_cfg.type = 'HGWCap' (did you mean " \
        "'HGWCaps'" in done.stderr
    assert not list(tmp_path.iterdir())  # no log: refused before the Runner


def save_model(config, path, edit_state=None, **hgw):
    cfg = load_offline_config(config)
    cfg.model.backbone.hgw_cfg.update(hgw)
    state = build_config_model(cfg).state_dict()
    if edit_state:
        edit_state(state)
    torch.save(dict(state_dict=state, meta=dict(epoch=0, iter=2)), path)


def test_resume_with_changed_capsule_shapes_names_the_keys(tmp_path, config):
    ckpt = str(tmp_path / 'iter_2.pth')
    save_model(config, ckpt, num_parts=2)  # the config has 4
    done = run_tool('tools/train.py', config, '--work-dir',
                    str(tmp_path / 'work'), '--resume', ckpt)
    assert done.returncode != 0
    assert f'cannot resume from {ckpt}' in done.stderr
    assert '.subcapsules: (8, 2, 4) in the checkpoint vs (8, 4, 4) in ' \
        'the model' in done.stderr
    assert not list((tmp_path / 'work').glob('*.pth'))


def drop_capsules(state):
    for key in [k for k in state if 'subcapsules' in k]:
        del state[key]


def bad_beta(state):
    key = next(k for k in state if k.endswith('.beta'))
    state[key] = torch.tensor(1.5)


@pytest.mark.parametrize('edit,message', [
    (drop_capsules, 'model weights it does not hold'),
    (bad_beta, "must be in [0, 1], got 1.5: the capsule layer's beta"),
])
def test_test_tool_refuses_a_checkpoint_that_does_not_load(
        tmp_path, config, edit, message):
    ckpt = str(tmp_path / 'model.pth')
    save_model(config, ckpt, edit)
    done = run_tool('tools/test.py', config, ckpt, '--work-dir',
                    str(tmp_path / 'test'))
    assert done.returncode != 0
    assert message in done.stderr
    assert "'mIoU':" not in done.stdout  # no metrics printed


def test_allow_partial_evaluates_with_a_warning(tmp_path, config):
    ckpt = str(tmp_path / 'model.pth')
    save_model(config, ckpt, drop_capsules)
    done = run_tool('tools/test.py', config, ckpt, '--allow-partial',
                    '--work-dir', str(tmp_path / 'test'))
    assert done.returncode == 0, done.stderr[-3000:]
    assert 'fits the model only partly (--allow-partial)' in \
        done.stdout + done.stderr
    assert "'mIoU':" in done.stdout


@pytest.mark.parametrize('script,args', [
    ('dist_train.sh', []),
    ('dist_train.sh', ['c.py', '0']),
    ('dist_train.sh', ['c.py', 'two']),
    ('dist_test.sh', ['c.py', 'k.pth']),
    ('dist_test.sh', ['c.py', 'k.pth', '-1']),
])
def test_launch_scripts_refuse_a_bad_process_count(script, args):
    done = subprocess.run(['bash', f'tools/{script}', *args], cwd=ROOT,
                          capture_output=True, text=True)
    assert done.returncode == 2
    assert f'usage: tools/{script} CONFIG ' in done.stderr
    assert 'NUM_PROCS must be a whole number >= 1' in done.stderr
