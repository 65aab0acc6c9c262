"""Every config in configs/ builds; each model family trains and predicts on
small synthetic inputs on the CPU."""
import glob
import os.path as osp

import numpy as np
import pytest
import torch
from mmengine.config import Config

import mmhgw  # noqa: F401
from mmhgw.config_check import check_registry_types
from mmhgw.config_utils import build_config_model, load_offline_config
from mmhgw.models import HGWCaps

ROOT = osp.dirname(osp.dirname(osp.abspath(__file__)))
ALL_CONFIGS = sorted(
    p
    for p in glob.glob(osp.join(ROOT, 'configs', '**', '*.py'), recursive=True)
    if '_base_' not in p)
#: Ablation configs change one argument of the capsule layer of the config
#: they inherit; they have a test of their own (building 20 full models
#: with initialisation would add a minute).
ABLATION_CONFIGS = [
    p for p in ALL_CONFIGS if osp.basename(osp.dirname(p)) == 'ablations'
]
CONFIGS = [p for p in ALL_CONFIGS if p not in ABLATION_CONFIGS]
#: Variant tag in an ablation config's name -> the HGWCaps arguments it sets.
VARIANTS = {
    'uniform': dict(routing='uniform'),
    'ablA': dict(solver_cfg=dict(regularizer='entropic')),
    'ablB': dict(reg_weight=0.0),
    'ablC': dict(use_observed=False),
    'counts': dict(observed='counts'),
}


def test_configs_found():
    assert len(CONFIGS) >= 10


@pytest.mark.parametrize('path', CONFIGS,
                         ids=[osp.relpath(p, ROOT) for p in CONFIGS])
def test_config_loads_and_builds(path):
    cfg = load_offline_config(path)
    check_registry_types(cfg, path)  # every type name is registered
    model = build_config_model(cfg)
    has_caps = any(isinstance(m, HGWCaps) for m in model.modules())
    assert has_caps == ('hgwcaps' in osp.basename(path))
    if has_caps:
        assert cfg.custom_imports.imports == ['mmhgw']
        hooks = [h.type for h in cfg.custom_hooks]
        assert 'HGWBetaWarmupHook' in hooks and 'HGWLossScaleHook' in hooks


def det_batch(model, training):
    from mmdet.structures import DetDataSample
    from mmdet.structures.mask import BitmapMasks
    from mmengine.structures import InstanceData
    gen = torch.Generator().manual_seed(0)
    inputs, samples = [], []
    for _ in range(2):
        inputs.append(
            torch.randint(0, 256, (3, 64, 96), generator=gen,
                          dtype=torch.uint8))
        sample = DetDataSample(metainfo=dict(img_shape=(64, 96), ori_shape=(
            64, 96), scale_factor=(1.0, 1.0), img_id=0))
        masks = np.zeros((2, 64, 96), dtype=np.uint8)
        masks[0, 8:40, 10:50] = 1
        masks[1, 30:60, 50:90] = 1
        sample.gt_instances = InstanceData(
            bboxes=torch.tensor([[10., 8., 50., 40.], [50., 30., 90., 60.]]),
            labels=torch.tensor([3, 7]), masks=BitmapMasks(masks, 64, 96))
        samples.append(sample)
    return model.data_preprocessor(dict(inputs=inputs, data_samples=samples),
                                   training)


def seg_batch(model, training, num_classes):
    from mmengine.structures import PixelData
    from mmseg.structures import SegDataSample
    gen = torch.Generator().manual_seed(0)
    inputs, samples = [], []
    for _ in range(2):
        inputs.append(
            torch.randint(0, 256, (3, 64, 64), generator=gen,
                          dtype=torch.uint8))
        sample = SegDataSample(
            metainfo=dict(img_shape=(64, 64), ori_shape=(64,
                                                         64), pad_shape=(64,
                                                                         64)))
        sample.gt_sem_seg = PixelData(
            data=torch.randint(0, num_classes, (1, 64, 64), generator=gen))
        samples.append(sample)
    return model.data_preprocessor(dict(inputs=inputs, data_samples=samples),
                                   training)


def check_loss_backward(model, losses):
    total, _ = model.parse_losses(losses)
    assert torch.isfinite(total)
    total.backward()
    caps = [m for m in model.modules() if isinstance(m, HGWCaps)]
    assert caps
    for m in caps:
        grad = m.subcapsules.grad
        assert grad is not None and torch.isfinite(grad).all()
        assert grad.abs().sum() > 0


@pytest.mark.parametrize('name', [
    'mask_rcnn/mask-rcnn_hgwcaps-r50_fpn_1x_coco.py',
    'mask_rcnn/mask-rcnn_hgwcaps-r50_hgwcaps-fpn_1x_coco.py',
])
def test_mask_rcnn_loss_and_predict(name):
    cfg = load_offline_config(osp.join(ROOT, 'configs', name))
    model = build_config_model(cfg)
    model.train()
    losses = model(**det_batch(model, True), mode='loss')
    assert {'loss_rpn_cls', 'loss_bbox', 'loss_mask'} <= set(losses)
    check_loss_backward(model, losses)
    model.eval()
    with torch.no_grad():
        results = model(**det_batch(model, False), mode='predict')
    assert len(results) == 2
    assert 'masks' in results[0].pred_instances


@pytest.mark.parametrize('name,num_classes', [
    ('unet/unet-hgwcaps-s5-d16_fcn_4xb4-20k_voc12aug-512x512.py', 21),
    ('deeplabv3plus/deeplabv3plus_hgwcaps-r50-d8_4xb4-20k_isic2018-512x512.py',
     2),
])
def test_segmentor_loss_and_predict(name, num_classes):
    cfg = load_offline_config(osp.join(ROOT, 'configs', name),
                              seg_size=(64, 64))
    model = build_config_model(cfg)
    model.train()
    losses = model(**seg_batch(model, True, num_classes), mode='loss')
    assert 'decode.loss_ce' in losses
    check_loss_backward(model, losses)
    model.eval()
    with torch.no_grad():
        results = model(**seg_batch(model, False, num_classes), mode='predict')
    assert results[0].pred_sem_seg.data.shape == (1, 64, 64)
    assert int(results[0].pred_sem_seg.data.max()) < num_classes


def test_config_inherits_stock_and_changes_only_the_backbone_type():
    ours = Config.fromfile(
        osp.join(ROOT,
                 'configs/mask_rcnn/mask-rcnn_hgwcaps-r50_fpn_1x_coco.py'))
    stock = load_offline_config(
        'mmdet::mask_rcnn/mask-rcnn_r50_fpn_1x_coco.py', keep_init=True)
    assert ours.train_cfg == stock.train_cfg
    assert ours.optim_wrapper == stock.optim_wrapper
    assert ours.model.neck == stock.model.neck
    backbone = dict(ours.model.backbone)
    for key in ('type', 'hgw_cfg', 'stage_with_hgw'):
        backbone.pop(key)
    stock_backbone = dict(stock.model.backbone)
    stock_backbone.pop('type')
    assert backbone == stock_backbone


def test_ablation_configs_cover_every_variant_of_each_model():
    names = [osp.basename(p) for p in ABLATION_CONFIGS]
    assert len(names) == 4 * len(VARIANTS)
    for tag in VARIANTS:
        for model in ('unet-hgwcaps-{}-s5-d16_fcn_demo-isic.py',
                      'mask-rcnn_hgwcaps-r50-{}_fpn_demo-shapes.py',
                      'unet-hgwcaps-{}-s5-d16_fcn_4xb4-20k_isic2018-512x512'
                      '.py', 'mask-rcnn_hgwcaps-r50-{}_fpn_1x_coco.py'):
            assert model.format(tag) in names


@pytest.mark.parametrize('path', ABLATION_CONFIGS,
                         ids=[osp.basename(p) for p in ABLATION_CONFIGS])
def test_ablation_config_changes_one_capsule_argument_and_builds(path):
    import re
    tag = next(t for t in VARIANTS if f'-{t}' in osp.basename(path))
    base_rel = re.search(r"_base_ = \['([^']+)'\]", open(path).read())[1]
    base = Config.fromfile(osp.normpath(osp.join(osp.dirname(path), base_rel)))
    cfg = load_offline_config(path)
    check_registry_types(cfg, path)
    assert 'hgwcaps' in osp.basename(path) and 'hgwcaps' in base_rel
    expected = dict(base.model.backbone.hgw_cfg, **VARIANTS[tag])
    assert cfg.model.backbone.hgw_cfg == expected
    assert cfg.train_cfg == base.train_cfg
    assert cfg.custom_hooks == base.custom_hooks
    model = build_config_model(cfg, init=False)
    caps = [m for m in model.modules() if isinstance(m, HGWCaps)]
    assert caps
    for m in caps:
        for key, value in VARIANTS[tag].items():
            actual = getattr(m, key)
            if isinstance(value, dict):  # a config dict, filled by the layer
                actual = {k: actual[k] for k in value}
            assert actual == value
    if 'demo-isic' in path:  # cheap: a tiny image through the whole UNet
        model.eval()
        with torch.no_grad():
            out = model(torch.randn(1, 3, 16, 16), mode='tensor')
        assert out.shape[-3:] == (2, 16, 16) and torch.isfinite(out).all()
