"""tools/analysis/plot_alignment.py draws the paper's Fig. 4 from
checkpoints of a trained model."""
import glob
import os.path as osp
import subprocess
import sys

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))


def run(*args):
    done = subprocess.run([sys.executable, *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    return done.stdout


def test_plot_alignment_writes_histograms_and_plan(tmp_path,
                                                   reduced_seg_config):
    config = str(reduced_seg_config(tmp_path, num_train=8, num_val=2))
    work = tmp_path / 'work'
    run('tools/train.py', config, '--work-dir', str(work), '--cfg-options',
        'train_cfg.max_iters=2', 'train_cfg.val_interval=100',
        'default_hooks.checkpoint.interval=1')
    image = sorted(
        glob.glob(str(tmp_path / 'ISIC2018' / 'images' / 'val' / '*.jpg')))[0]
    out = run('tools/analysis/plot_alignment.py', config,
              str(work / 'iter_1.pth'), str(work / 'iter_2.pth'), '--image',
              image, '--types', '3', '--out-dir', str(tmp_path / 'plots'))
    for name in ('alignment_histograms.png', 'transport_plan.png'):
        path = tmp_path / 'plots' / name
        assert path.exists() and path.stat().st_size > 5000
        assert name in out
    # Its own lines only: no initialisation table of every parameter.
    assert 'torch.Size' not in out and 'Initialized by' not in out
    bad = subprocess.run([
        sys.executable, 'tools/analysis/plot_alignment.py', config,
        str(work / 'iter_2.pth'), '--image', image, '--layer', 'nope'
    ], cwd=ROOT, capture_output=True, text=True)
    assert bad.returncode != 0 and 'is not an HGWCaps layer' in bad.stderr


def test_bad_arguments_are_refused_before_any_model_is_built(
        tmp_path, reduced_seg_config):
    config = str(reduced_seg_config(tmp_path, num_train=2, num_val=2))
    image = sorted(
        glob.glob(str(tmp_path / 'ISIC2018' / 'images' / 'val' / '*.jpg')))[0]
    missing = str(tmp_path / 'iter_9.pth')
    for args, message in (
        ([config, missing, '--image', image], f'checkpoint {missing} not '
         'found'),
        ([config, config, '--image',
          'nope.jpg'], '--image nope.jpg not found'),
        ([config, config, '--image', image, '--types',
          '0'], '--types must be >= 1, got 0'),
    ):
        bad = subprocess.run(
            [sys.executable, 'tools/analysis/plot_alignment.py', *args],
            cwd=ROOT, capture_output=True, text=True)
        assert bad.returncode == 2 and message in bad.stderr, bad.stderr
