"""tools/analysis/affine_robustness.py on detectors: CocoMetric scores the
warped objects, not its annotation file."""
import json
import os.path as osp

import numpy as np
import pytest
import torch
from mmengine.config import Config

from mmhgw.config_utils import build_config_model, load_offline_config
from mmhgw.datasets import InstancesFromLabels
from mmhgw.datasets.synthetic import make_coco_instances
from tools.analysis.affine_robustness import (coco_metric_names, main,
                                              warp_test_cfg, warped_pipeline)

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
STOCK_DET = osp.join(ROOT, 'configs/demo/mask-rcnn_r50_fpn_demo-shapes.py')
QUARTER_TURN = dict(type='AffineWarp', angle=90)


def det_config(data):
    cfg = Config.fromfile(STOCK_DET)
    cfg.test_dataloader.dataset.data_root = str(data)
    cfg.test_evaluator.ann_file = str(data / 'annotations' /
                                      'instances_val2017.json')
    return cfg


def perfect_predictions(masks, labels):
    """A detector's output that is exactly these objects."""
    from mmengine.structures import InstanceData
    boxes = []
    for mask in masks:
        ys, xs = np.nonzero(mask)
        boxes.append([xs.min(), ys.min(), xs.max() + 1, ys.max() + 1])
    pred = InstanceData()
    pred.bboxes = torch.tensor(boxes, dtype=torch.float32)
    pred.scores = torch.ones(len(masks))
    pred.labels = torch.tensor(labels)
    pred.masks = torch.from_numpy(np.stack(masks).astype(bool))
    return pred


def test_detector_metric_scores_the_warped_objects(tmp_path):
    from mmdet.registry import DATASETS, METRICS
    from mmengine.registry import init_default_scope
    from pycocotools.coco import COCO
    data = tmp_path / 'coco'
    make_coco_instances(str(data), num_train=1, num_val=3, size=(96, 96))
    cfg = det_config(data)
    ann = cfg.test_evaluator.ann_file
    warp_test_cfg(cfg, QUARTER_TURN)
    assert cfg.test_evaluator.ann_file is None
    init_default_scope('mmdet')
    dataset = DATASETS.build(cfg.test_dataloader.dataset)
    warped = METRICS.build(cfg.test_evaluator)
    unwarped = METRICS.build(det_config(data).test_evaluator)
    coco = COCO(ann)
    for index in range(len(dataset)):
        sample = dataset[index]['data_samples']
        objects = coco.loadAnns(coco.getAnnIds(imgIds=sample.img_id))
        # The oracle: the file's objects turned a quarter counter-clockwise
        # (on a square image, np.rot90).
        masks = [np.rot90(coco.annToMask(a)).copy() for a in objects]
        labels = [a['category_id'] - 1 for a in objects]
        sample.pred_instances = perfect_predictions(masks, labels)
        for metric in (warped, unwarped):
            metric.dataset_meta = dataset.metainfo
            metric.process({}, [sample.to_dict()])
    scores = warped.evaluate(len(dataset))
    assert scores['coco/bbox_mAP'] == 1.0
    assert scores['coco/segm_mAP'] == 1.0
    # Scored against the annotation file, the same objects look missed.
    assert unwarped.evaluate(len(dataset))['coco/bbox_mAP'] < 0.5


def test_instances_follow_the_masks_and_drop_what_left():
    from mmdet.structures.bbox import HorizontalBoxes
    from mmdet.structures.mask import BitmapMasks
    from pycocotools import mask as mask_util
    masks = np.zeros((3, 8, 8), np.uint8)
    masks[0, 2:4, 1:6] = 1
    masks[2, 5:8, 0:2] = 1  # masks[1] left the image
    boxes = HorizontalBoxes(
        np.array([[0, 0, 8, 8], [1, 1, 2, 2], [0, 4, 3, 8]], np.float32))
    out = InstancesFromLabels()(dict(
        gt_bboxes=boxes, gt_bboxes_labels=np.array([3, 1, 0]),
        gt_ignore_flags=np.array([False, False,
                                  True]), gt_masks=BitmapMasks(masks, 8, 8)))
    first, last = out['instances']
    assert len(out['instances']) == 2
    # The mask's tight box, not the loaded (enclosing) one.
    assert first['bbox'] == [1, 2, 6, 4] and first['bbox_label'] == 3
    assert np.array_equal(mask_util.decode(first['mask']), masks[0])
    assert last['ignore_flag'] == 1 and last['bbox'] == [0, 5, 2, 8]
    # Without masks, the boxes; empty ones dropped.
    boxes = HorizontalBoxes(np.array([[1, 1, 5, 3], [2, 2, 2, 6]], np.float32))
    out = InstancesFromLabels()(dict(gt_bboxes=boxes,
                                     gt_bboxes_labels=np.array([0, 1])))
    assert out['instances'] == [
        dict(bbox_label=0, ignore_flag=0, bbox=[1, 1, 5, 3])
    ]
    with pytest.raises(KeyError, match='gt_bboxes_labels'):
        InstancesFromLabels()(dict(gt_bboxes=boxes))


def test_detector_pipeline_packs_the_warped_instances():
    pipeline = [
        dict(type='LoadImageFromFile'),
        dict(type='Resize'),
        dict(type='LoadAnnotations', with_bbox=True),
        dict(type='mmdet.PackDetInputs', meta_keys=('img_id', 'ori_shape'))
    ]
    out = warped_pipeline(pipeline, QUARTER_TURN, instances=True)
    assert [s['type'] for s in out] == [
        'LoadImageFromFile', 'AffineWarp', 'Resize', 'LoadAnnotations',
        'AffineWarp', 'InstancesFromLabels', 'mmdet.PackDetInputs'
    ]
    assert out[-1]['meta_keys'] == ('img_id', 'ori_shape', 'instances')
    # PackDetInputs without meta_keys keeps its own.
    out = warped_pipeline(pipeline[:3] + [dict(type='PackDetInputs')],
                          QUARTER_TURN, instances=True)
    assert out[-1]['meta_keys'][0] == 'img_id'
    assert out[-1]['meta_keys'][-1] == 'instances'
    with pytest.raises(ValueError, match='LoadAnnotations'):
        warped_pipeline(pipeline[:2] + pipeline[3:], QUARTER_TURN,
                        instances=True)
    with pytest.raises(ValueError, match='PackDetInputs'):
        warped_pipeline(pipeline[:3], QUARTER_TURN, instances=True)


def test_metric_reading_its_own_file_is_refused():
    cfg = Config(
        dict(test_evaluator=[dict(type='LVISMetric', ann_file='lvis.json')],
             test_dataloader=dict(dataset=dict(pipeline=[]))))
    with pytest.raises(ValueError, match='LVISMetric.*ann_file'):
        warp_test_cfg(cfg, QUARTER_TURN)


def test_detector_sweep_runs_end_to_end(tmp_path):
    data = tmp_path / 'coco'
    make_coco_instances(str(data), num_train=1, num_val=2)
    checkpoint = str(tmp_path / 'det.pth')
    model = build_config_model(load_offline_config(STOCK_DET), init=False)
    torch.save({'state_dict': model.state_dict(), 'meta': {}}, checkpoint)
    ann = data / 'annotations' / 'instances_val2017.json'
    out = tmp_path / 'rotation.json'
    main([
        '--model', 'stock', STOCK_DET, checkpoint, '--values', '0', '90',
        '--out',
        str(out), '--cfg-options', f'test_dataloader.dataset.data_root={data}',
        f'test_evaluator.ann_file={ann}', 'model.test_cfg.rpn.max_per_img=20'
    ])
    result = json.loads(out.read_text())
    assert set(result['results']['stock']) == {'0.0', '90.0'}
    assert set(result['others']) == {'coco/segm_mAP'}


def test_main_scores_of_a_coco_metric():
    names = coco_metric_names
    assert names(dict(type='CocoMetric')) == ('coco', ['coco/bbox_mAP'])
    both = dict(metric=['bbox', 'segm'], prefix='det')
    assert names(both) == ('det', ['det/bbox_mAP', 'det/segm_mAP'])
    items = dict(metric='segm', metric_items=['mAP_50'])
    assert names(items)[1] == ['coco/segm_mAP_50']
    assert names(dict(metric='proposal'))[1] == ['coco/AR@100']


@pytest.fixture
def no_model_runs(monkeypatch):
    import tools.analysis.affine_robustness as tool

    def no_evaluation(*args, **kwargs):
        raise AssertionError('a model ran')

    monkeypatch.setattr(tool, 'evaluate', no_evaluation)


def test_metric_a_detector_cannot_report_is_refused_before_it_runs(
        tmp_path, no_model_runs):
    checkpoint = tmp_path / 'det.pth'
    checkpoint.write_bytes(b'')
    args = [
        '--model', 'stock', STOCK_DET,
        str(checkpoint), '--values', '0', '90', '--out',
        str(tmp_path / 'r.json')
    ]
    with pytest.raises(ValueError, match='--metric mIoU: model stock.*coco/'):
        main([*args, '--metric', 'mIoU'])
    # The names follow the evaluator's prefix.
    with pytest.raises(ValueError,
                       match='--metric coco/bbox_mAP:.*det/bbox_mAP'):
        main([
            *args, '--metric', 'coco/bbox_mAP', '--cfg-options',
            'test_evaluator.prefix=det'
        ])


def test_models_of_both_kinds_need_the_metric_named(tmp_path, seg_config,
                                                    seg_checkpoint,
                                                    no_model_runs):
    checkpoint = tmp_path / 'det.pth'
    checkpoint.write_bytes(b'')
    with pytest.raises(
            ValueError, match='--metric is needed.*seg: mIoU.*'
            'det: coco/bbox_mAP coco/segm_mAP'):
        main([
            '--model', 'seg', seg_config, seg_checkpoint, '--model', 'det',
            STOCK_DET,
            str(checkpoint), '--values', '0', '90', '--out',
            str(tmp_path / 'r.json')
        ])
