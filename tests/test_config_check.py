"""A misspelt ``type`` anywhere in a config is refused before any build,
naming the key and the closest registered names."""
import copy
import os.path as osp

import pytest

import mmhgw  # noqa: F401
from mmhgw.config_check import ConfigTypeError, check_registry_types
from mmhgw.config_utils import load_config

ROOT = osp.dirname(osp.abspath(__file__))
DET = osp.join(osp.dirname(ROOT),
               'configs/demo/mask-rcnn_hgwcaps-r50_fpn_demo-shapes.py')
SEG = osp.join(osp.dirname(ROOT),
               'configs/demo/unet-hgwcaps-s5-d16_fcn_demo-isic.py')


@pytest.fixture(scope='module')
def det_cfg():
    return load_config(DET)


def typo(cfg, edit):
    cfg = copy.deepcopy(cfg)
    edit(cfg)
    with pytest.raises(ConfigTypeError) as err:
        check_registry_types(cfg, 'my_config.py')
    return str(err.value)


def test_capsule_layer_typo_names_key_and_suggestion(det_cfg):
    message = typo(det_cfg,
                   lambda c: c.model.backbone.hgw_cfg.update(type='HGWCap'))
    assert message.startswith('my_config.py: unknown type name')
    assert "model.backbone.hgw_cfg.type = 'HGWCap' (did you mean " \
        "'HGWCaps'" in message


@pytest.mark.parametrize('edit,key', [
    (lambda c: c.train_dataloader.dataset.pipeline[1].update(
        type='LoadAnnotation'), 'train_dataloader.dataset.pipeline[1].type'),
    (lambda c: c.model.roi_head.bbox_head.update(type='Shared2FCBoxHed'),
     'model.roi_head.bbox_head.type'),
    (lambda c: c.param_scheduler[0].update(type='LinerLR'),
     'param_scheduler[0].type'),
    (lambda c: c.custom_hooks[0].update(type='HGWBetaWarmup'),
     'custom_hooks[0].type'),
    (lambda c: c.model.test_cfg.rpn.nms.update(type='nmss'),
     'model.test_cfg.rpn.nms.type'),
    (lambda c: c.model.backbone.update(type='mmdet.ResNett'),
     'model.backbone.type'),
])
def test_typos_anywhere_are_named(det_cfg, edit, key):
    assert f'{key} = ' in typo(det_cfg, edit)


def test_registered_scoped_and_importable_names_pass(det_cfg):
    cfg = copy.deepcopy(det_cfg)
    cfg.model.neck.type = 'mmdet.FPN'  # scope prefix
    cfg.model.neck.norm_cfg = dict(type='mmseg.SyncBN')  # another scope
    cfg.model.data_preprocessor._scope_ = 'mmdet'
    cfg.visualizer.type = 'mmengine.visualization.Visualizer'  # a path
    check_registry_types(cfg)
    # mmcv ops looked up by name, and a segmentation config.
    assert det_cfg.model.test_cfg.rpn.nms.type == 'nms'
    check_registry_types(load_config(SEG))
