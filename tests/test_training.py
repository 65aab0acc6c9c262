"""Training for real on generated data: learning, exact resume, and
distributed training on the CPU. A reduced HGWCaps UNet keeps it quick."""
import os
import os.path as osp
import subprocess
import sys

import pytest
import torch
from mmengine.config import Config
from mmengine.runner import Runner

from mmhgw.testing import free_port

ROOT = osp.dirname(osp.dirname(osp.abspath(__file__)))


def test_hgw_model_learns(tmp_path, reduced_seg_config):
    cfg = Config.fromfile(str(reduced_seg_config(tmp_path)))
    cfg.work_dir = str(tmp_path / 'work')
    cfg.train_cfg.max_iters = cfg.train_cfg.val_interval = 40
    cfg.default_hooks.checkpoint.interval = 40
    runner = Runner.from_cfg(cfg)
    untrained = runner.val()
    runner.train()
    trained = runner.val()
    losses = runner.message_hub.get_scalar('train/loss').data[0]
    assert len(losses) == 40
    assert losses[-10:].mean() < 0.7 * losses[:10].mean()
    # Untrained, the lesion class is missed or everywhere; trained, found.
    assert trained['mIoU'] > untrained['mIoU'] + 15, (untrained, trained)
    assert trained['mIoU'] > 60
    reg = runner.message_hub.get_scalar('train/hgw_reg').data[0]
    beta = runner.message_hub.get_scalar('train/hgw_beta').data[0]
    assert len(reg) == 40 and torch.isfinite(torch.tensor(reg)).all()
    assert beta[0] == 0 and beta[-1] == pytest.approx(0.5)


def run_train(*args, env=None, timeout=600):
    done = subprocess.run([sys.executable, 'tools/train.py', *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout,
                          env=env)
    assert done.returncode == 0, done.stderr[-4000:]
    return done.stdout + done.stderr


def test_resume_matches_uninterrupted_run(tmp_path, reduced_seg_config):
    config = str(reduced_seg_config(tmp_path, num_train=12, num_val=2))
    common = [
        'default_hooks.checkpoint.interval=2', 'train_cfg.val_interval=100'
    ]
    straight, split = tmp_path / 'straight', tmp_path / 'split'
    run_train(config, '--work-dir', str(straight), '--cfg-options',
              'train_cfg.max_iters=4', *common)
    # Interrupted at iteration 2, then resumed from the work dir's latest.
    run_train(config, '--work-dir', str(split), '--cfg-options',
              'train_cfg.max_iters=2', *common)
    log = run_train(config, '--work-dir', str(split), '--resume',
                    '--cfg-options', 'train_cfg.max_iters=4', *common)
    assert 'resumed' in log.lower()
    a = torch.load(straight / 'iter_4.pth')
    b = torch.load(split / 'iter_4.pth')
    assert a['meta']['iter'] == b['meta']['iter'] == 4
    for key, value in a['state_dict'].items():
        torch.testing.assert_close(b['state_dict'][key], value, rtol=0, atol=0,
                                   msg=key)


def test_distributed_training_on_cpu_keeps_ranks_identical(
        tmp_path, reduced_seg_config):
    config = str(reduced_seg_config(tmp_path, num_train=8, num_val=2))
    env = dict(os.environ, PYTHON=sys.executable, PORT=str(free_port()))
    done = subprocess.run([
        'bash', 'tools/dist_train.sh', config, '2', '--work-dir',
        str(tmp_path / 'work'), '--cfg-options', 'train_cfg.max_iters=3',
        'train_cfg.val_interval=100', 'default_hooks.checkpoint.interval=3'
    ], cwd=ROOT, capture_output=True, text=True, timeout=600, env=env)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-4000:]
    assert 'Distributed training is not used' not in out
    assert "'backend': 'gloo'" in out or 'gloo' in out
    assert 'parameters identical on 2 ranks' in out
    assert (tmp_path / 'work' / 'iter_3.pth').exists()


THREADS_AT_EXIT = '''
import os, runpy, sys
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name='__main__')
names = [open(f'/proc/self/task/{t}/comm').read().strip()
         for t in os.listdir('/proc/self/task')]
print('threads at exit:', sorted(names))
'''


@pytest.mark.skipif(not sys.platform.startswith('linux'),
                    reason='reads thread names from /proc')
def test_distributed_tools_stop_the_gloo_threads_before_exit(
        tmp_path, reduced_seg_config):
    # gloo threads still running while the interpreter shuts down can abort
    # a rank whose run succeeded: the tools release the process group first.
    config = str(reduced_seg_config(tmp_path, num_train=4, num_val=2))
    wrapper = tmp_path / 'threads_at_exit.py'
    wrapper.write_text(THREADS_AT_EXIT)
    work = tmp_path / 'work'

    def launch(tool, *args):
        done = subprocess.run([
            sys.executable, '-m', 'torch.distributed.run',
            '--nproc_per_node=2', f'--master_port={free_port()}',
            str(wrapper), tool, config, *args, '--launcher', 'pytorch'
        ], cwd=ROOT, capture_output=True, text=True, timeout=600)
        out = done.stdout + done.stderr
        assert done.returncode == 0, out[-4000:]
        lines = [ln for ln in out.splitlines() if 'threads at exit:' in ln]
        assert len(lines) == 2, out[-4000:]
        for line in lines:
            assert 'gloo' not in line, line

    launch('tools/train.py', '--work-dir', str(work), '--cfg-options',
           'train_cfg.max_iters=2', 'train_cfg.val_interval=100',
           'default_hooks.checkpoint.interval=2')
    launch('tools/test.py', str(work / 'iter_2.pth'), '--work-dir',
           str(work / 'test'))
