"""tools/train.py and tools/test.py run mmdet and mmseg configs end to end
on generated data (a few iterations; learning itself is tested elsewhere)."""
import glob
import os.path as osp
import subprocess
import sys

import pytest

from mmhgw.config_utils import NO_VALIDATION_OPTIONS
from mmhgw.datasets.synthetic import make_coco_instances, make_isic_lesions

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))


def run_tool(*args, timeout=600):
    done = subprocess.run([sys.executable, *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-4000:])
    return done.stdout + done.stderr


def data_root_options(root, det):
    opts = [
        f'{loader}.dataset.data_root={root}'
        for loader in ('train_dataloader', 'val_dataloader', 'test_dataloader')
    ]
    if det:
        ann = osp.join(root, 'annotations', 'instances_val2017.json')
        opts += [
            f'val_evaluator.ann_file={ann}', f'test_evaluator.ann_file={ann}'
        ]
    return opts


@pytest.mark.parametrize('config,det,metric', [
    ('configs/demo/mask-rcnn_hgwcaps-r50_fpn_demo-shapes.py', True,
     'coco/segm_mAP'),
    ('configs/demo/unet-hgwcaps-s5-d16_fcn_demo-isic.py', False, 'mIoU'),
])
def test_train_then_test(tmp_path, config, det, metric):
    data = tmp_path / 'data'
    if det:
        make_coco_instances(str(data), num_train=4, num_val=2)
    else:
        make_isic_lesions(str(data), num_train=4, num_val=2, size=(64, 64))
    work = tmp_path / 'work'
    options = ['train_cfg.max_iters=2', 'train_cfg.val_interval=2',
               'default_hooks.checkpoint.interval=2',
               'train_dataloader.batch_size=2'] + \
        data_root_options(str(data), det)
    log = run_tool('tools/train.py', config, '--work-dir', str(work),
                   '--cfg-options', *options)
    assert 'hgw_reg' in log and 'hgw_beta' in log  # the HGW terms are logged
    assert metric in log
    checkpoint = work / 'iter_2.pth'
    assert checkpoint.exists()
    out = run_tool('tools/test.py', config, str(checkpoint), '--work-dir',
                   str(tmp_path / 'test'), '--cfg-options',
                   *data_root_options(str(data), det))
    assert metric in out
    assert glob.glob(str(tmp_path / 'test' / '*' / '*.log'))


def test_no_validation_options_train_without_a_validation_loop(tmp_path):
    """The study and demo tools evaluate with tools/test.py; a large
    ``val_interval`` alone still validates after the last iteration."""
    data = tmp_path / 'data'
    make_isic_lesions(str(data), num_train=2, num_val=2, size=(32, 32))
    options = ['train_cfg.max_iters=1', 'default_hooks.checkpoint.interval=1',
               'train_dataloader.batch_size=2'] + \
        data_root_options(str(data), False)
    config = 'configs/demo/unet-s5-d16_fcn_demo-isic.py'
    log = run_tool('tools/train.py', config, '--work-dir', str(tmp_path / 'a'),
                   '--cfg-options', *options, 'train_cfg.val_interval=1000')
    assert 'Iter(val)' in log
    log = run_tool('tools/train.py', config, '--work-dir', str(tmp_path / 'b'),
                   '--cfg-options', *options, *NO_VALIDATION_OPTIONS)
    assert 'Iter(val)' not in log
    assert (tmp_path / 'b' / 'iter_1.pth').exists()
