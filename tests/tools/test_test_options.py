"""tools/test.py takes the stock test scripts' options (--out, --show-dir,
--tta, ...) and applies them as mmdet's, mmseg's and mmpretrain's scripts
do: end to end on generated data for mmdet and mmseg, on the config for
the rest."""
import argparse
import glob
import json
import os.path as osp
import pickle
import runpy
import sys

import numpy as np
import pytest
import torch
from mmengine.config import Config

from mmhgw.config_utils import build_config_model, load_offline_config
from mmhgw.datasets.synthetic import make_coco_instances
from mmhgw.engine.test_options import (add_test_options, apply_test_options,
                                       plain_metrics, write_test_outputs)

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
STOCK_DET = osp.join(ROOT, 'configs/demo/mask-rcnn_r50_fpn_demo-shapes.py')
PRETRAIN = osp.join(ROOT, 'configs/pretrain/cifar-resnet20_demo-shapes.py')


def save_random_checkpoint(config, path):
    model = build_config_model(load_offline_config(str(config)), init=False)
    torch.save({'state_dict': model.state_dict(), 'meta': {}}, str(path))
    return str(path)


def run_test_tool(monkeypatch, *argv):
    """tools/test.py in this process."""
    monkeypatch.setattr(sys, 'argv', ['tools/test.py', *argv])
    runpy.run_path(osp.join(ROOT, 'tools', 'test.py'), run_name='__main__')


def unique_names(tmp_path):
    """Logger and visualizer names of a run of its own in this process: the
    hooks take mmengine's latest *new* visualizer, and the configs all name
    theirs 'visualizer'."""
    return [
        f'experiment_name={tmp_path.name}', f'visualizer.name={tmp_path.name}'
    ]


def dumped_config(work):
    """The config as the Runner saved it into ``work``."""
    return Config.fromfile(glob.glob(str(work / '*.py'))[0])


def test_mmdet_out_show_dir_and_flip_tta(tmp_path, monkeypatch):
    data = tmp_path / 'coco'
    make_coco_instances(str(data), num_train=2, num_val=2)
    checkpoint = save_random_checkpoint(STOCK_DET, tmp_path / 'det.pth')
    out = tmp_path / 'det.pkl'
    ann = data / 'annotations' / 'instances_val2017.json'
    run_test_tool(
        monkeypatch,
        STOCK_DET,
        checkpoint,
        '--work-dir',
        str(tmp_path / 'work'),
        '--out',
        str(out),
        '--show-dir',
        'painted',
        # The checkpoint holds the mask head this test leaves out.
        '--tta',
        '--allow-partial',
        '--cfg-options',
        *unique_names(tmp_path),
        f'test_dataloader.dataset.data_root={data}',
        f'test_evaluator.ann_file={ann}',
        'test_evaluator.metric=bbox',
        # DetTTAModel merges boxes only: the box part of Mask R-CNN.
        'model.roi_head.mask_head=None',
        'model.roi_head.mask_roi_extractor=None',
        'model.test_cfg.rpn.max_per_img=20',
        'model.test_cfg.rcnn.max_per_img=10')
    with open(out, 'rb') as f:
        results = pickle.load(f)
    assert len(results) == 2 and all('pred_instances' in r for r in results)
    painted = glob.glob(str(tmp_path / 'work' / '*' / 'painted' / '*.jpg'))
    assert len(painted) == 2
    dumped = dumped_config(tmp_path / 'work')
    assert dumped.model.type == 'DetTTAModel'
    assert dumped.model.module.type == 'MaskRCNN'
    aug = dumped.test_dataloader.dataset.pipeline[-1]
    assert aug.type == 'TestTimeAug'
    assert [t.prob for t in aug.transforms[0]] == [0., 1.]
    assert {'flip', 'flip_direction'} <= set(aug.transforms[1][0].meta_keys)


def test_mmseg_out_show_dir_and_flip_tta(tmp_path, monkeypatch,
                                         reduced_seg_config):
    config = reduced_seg_config(tmp_path, num_train=2, num_val=2)
    checkpoint = save_random_checkpoint(config, tmp_path / 'seg.pth')
    out, painted = tmp_path / 'masks', tmp_path / 'painted'
    metrics = tmp_path / 'metrics.json'
    run_test_tool(monkeypatch, str(config), checkpoint, '--work-dir',
                  str(tmp_path / 'work'), '--out', str(out), '--show-dir',
                  str(painted), '--interval', '1', '--tta', '--metrics-out',
                  str(metrics), '--cfg-options', *unique_names(tmp_path))
    assert len(glob.glob(str(out / '*.png'))) == 2
    assert len(glob.glob(str(painted / 'vis_data' / 'vis_image' /
                             '*.png'))) == 2
    with open(metrics) as f:
        assert 'mIoU' in json.load(f)
    dumped = dumped_config(tmp_path / 'work')
    assert dumped.model.type == 'SegTTAModel'
    aug = dumped.test_dataloader.dataset.pipeline[-1]
    # The original view first; annotations loaded after the flip, unflipped.
    assert [t.prob for t in aug.transforms[0]] == [0., 1.]
    assert aug.transforms[1][0].type == 'LoadAnnotations'
    assert not any(t.type == 'LoadAnnotations'
                   for t in dumped.test_dataloader.dataset.pipeline[:-1])


def test_metrics_of_numpy_2_types_are_written(tmp_path, monkeypatch,
                                              reduced_seg_config):
    # Under NumPy 2 mmseg's IoUMetric returns float32 scalars (NEP 50 keeps
    # the type through its rounding), which json refuses; the pinned NumPy
    # 1 gives float64. The test tool writes them all the same.
    from mmseg.evaluation import IoUMetric
    stock = IoUMetric.compute_metrics

    def as_numpy_2(self, results):
        return {k: np.float32(v) for k, v in stock(self, results).items()}

    monkeypatch.setattr(IoUMetric, 'compute_metrics', as_numpy_2)
    config = reduced_seg_config(tmp_path, num_train=2, num_val=1)
    checkpoint = save_random_checkpoint(config, tmp_path / 'seg.pth')
    metrics = tmp_path / 'metrics.json'
    run_test_tool(monkeypatch, str(config), checkpoint, '--work-dir',
                  str(tmp_path / 'work'), '--metrics-out', str(metrics),
                  '--cfg-options', *unique_names(tmp_path))
    with open(metrics) as f:
        written = json.load(f)
    assert isinstance(written['mIoU'], float)
    assert 0 <= written['mIoU'] <= 100


def test_plain_metrics_turns_numpy_and_torch_values_into_python():
    metrics = {
        'mIoU': np.float32(71.25), 'count': np.int64(3),
        'per_class': np.array([1.5, 2.5],
                              dtype=np.float32), 'loss': torch.tensor(0.5),
        'areas': torch.tensor([1, 2]), 'nested': {'acc': np.float16(0.5)},
        'name': 'mIoU', 'none': None, 'plain': 2.0
    }
    plain = plain_metrics(metrics)
    assert json.loads(json.dumps(plain)) == {
        'mIoU': 71.25, 'count': 3, 'per_class': [1.5, 2.5], 'loss': 0.5,
        'areas': [1, 2], 'nested': {'acc': 0.5}, 'name': 'mIoU', 'none': None,
        'plain': 2.0
    }
    assert type(plain['mIoU']) is float and type(plain['count']) is int
    with pytest.raises(TypeError, match='float32'):
        json.dumps({'mIoU': np.float32(1)})  # what the tool had to write


def options(*argv):
    parser = argparse.ArgumentParser()
    add_test_options(parser)
    return parser.parse_args(list(argv))


def applied(config, *argv):
    cfg = Config.fromfile(config)
    apply_test_options(cfg, options(*argv))
    return cfg


def test_mmpretrain_options_as_its_script(tmp_path):
    cfg = applied(PRETRAIN, '--out', 'preds.pkl', '--show-dir', 'vis', '--tta',
                  '--amp', '--no-pin-memory')
    assert cfg.test_evaluator[-1] == dict(type='DumpResults',
                                          out_file_path='preds.pkl')
    hook = cfg.default_hooks.visualization
    assert (hook.enable, hook.out_dir, hook.interval, hook.show) == \
        (True, 'vis', 1, False)
    assert cfg.model.type == 'mmpretrain.AverageClsScoreTTA'
    assert cfg.model.module.type == 'ImageClassifier'
    assert cfg.test_cfg.fp16 is True
    assert cfg.test_dataloader.pin_memory is False
    # --out-item metrics: the metrics go to --out after the test, nothing
    # dumps predictions.
    args = options('--out', str(tmp_path / 'm.json'), '--out-item', 'metrics')
    cfg = Config.fromfile(PRETRAIN)
    apply_test_options(cfg, args)
    assert 'DumpResults' not in str(cfg.test_evaluator)
    write_test_outputs({'accuracy/top1': 50.0}, args)
    with open(tmp_path / 'm.json') as f:
        assert json.load(f) == {'accuracy/top1': 50.0}


def test_show_sets_the_hook_for_mmdet_and_mmseg(reduced_seg_config, tmp_path):
    hook = applied(STOCK_DET, '--show', '--wait-time',
                   '0.5').default_hooks.visualization
    assert (hook.draw, hook.show, hook.wait_time) == (True, True, 0.5)
    hook = applied(str(reduced_seg_config(tmp_path, 2, 2)), '--show',
                   '--interval', '3').default_hooks.visualization
    assert (hook.draw, hook.show, hook.wait_time, hook.interval) == \
        (True, True, 2, 3)


@pytest.mark.parametrize('config,argv,match', [
    (STOCK_DET, ['--out', 'preds.json'], '--out preds.json: .*pkl'),
    (STOCK_DET, ['--out', 'p.pkl', '--out-item', 'pred'
                 ], '--out-item: only for mmpretrain'),
    (PRETRAIN, ['--out-item', 'metrics'], '--out-item needs --out'),
    (STOCK_DET, ['--tta'], 'DetTTAModel merges boxes only'),
])
def test_bad_option_combinations_fail_before_the_runner(config, argv, match):
    with pytest.raises(ValueError, match=match):
        applied(config, *argv)


def test_options_need_a_stock_scope_and_a_visualization_hook():
    cfg = Config.fromfile(STOCK_DET)
    cfg.default_scope = 'mmengine'
    with pytest.raises(
            ValueError, match="--tta: the config's default_scope"
            " is 'mmengine'"):
        apply_test_options(cfg, options('--tta'))
    cfg = Config.fromfile(STOCK_DET)
    del cfg.default_hooks['visualization']
    with pytest.raises(ValueError, match='need a visualization hook'):
        apply_test_options(cfg, options('--show-dir', 'x'))
