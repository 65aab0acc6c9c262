"""tools/analysis/get_flops.py on detector and segmentor configs."""
import os.path as osp

import pytest

from tools.analysis.get_flops import main

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))

SEG_HGW = osp.join(ROOT, 'configs/demo/unet-hgwcaps-s5-d16_fcn_demo-isic.py')
SEG_STOCK = osp.join(ROOT, 'configs/demo/unet-s5-d16_fcn_demo-isic.py')
DET_HGW = osp.join(ROOT,
                   'configs/demo/mask-rcnn_hgwcaps-r50_fpn_demo-shapes.py')
NARROW = [
    'model.backbone.base_channels=16', 'model.decode_head.in_channels=16',
    'model.decode_head.channels=16', 'model.auxiliary_head.in_channels=32',
    'model.auxiliary_head.channels=16'
]


def test_segmentor_flops_with_and_without_capsules(capsys):
    hgw, hgw_params = main([
        SEG_HGW, '--shape', '32', '48', '--cfg-options', *NARROW,
        'model.backbone.hgw_cfg.in_types=8',
        'model.backbone.hgw_cfg.out_types=8', '--table-depth', '1'
    ])
    out = capsys.readouterr().out
    assert 'Input shape:  1 x 3 x 32 x 48' in out and '| model' in out
    # "(all ops counted)" only above no "Not counted:" list.
    assert ('(all ops counted)' in out) != ('Not counted:' in out)
    stock, stock_params = main(
        [SEG_STOCK, '--shape', '32', '48', '--cfg-options', *NARROW])
    assert 0 < hgw.hgw < hgw.total and stock.hgw == 0
    assert hgw.elementwise > stock.elementwise
    assert hgw_params < stock_params


def test_detector_flops_include_rpn_and_roi_heads(capsys):
    report, params = main([DET_HGW, '--shape', '64'])
    out = capsys.readouterr().out
    assert 'Input shape:  1 x 3 x 64 x 64' in out
    # mmcv's RoIAlign and NMS have no handle: listed, and the total says so.
    assert 'Not counted:' in out and '(all ops counted)' not in out
    assert 'without the ops under "Not counted"' in out
    assert report.hgw > 0 and params > 1e7
    # The RoI heads (fc layers) run on the proposals: linear layers counted.
    assert report.by_operator.get('linear', 0) > 0


def test_default_shape_is_the_models_own_input(capsys):
    """Without ``--shape`` a segmentor is counted at the crop its config
    pads to (the demo UNet: 128 x 128, where 800 x 1333 is no multiple of
    its downsampling); a detector at 800 x 1333."""
    from mmengine.config import Config

    from mmhgw.analysis.tracing import DETECTOR_SHAPE, check_shape
    main([
        SEG_HGW, '--cfg-options', *NARROW, 'model.backbone.hgw_cfg.in_types=8',
        'model.backbone.hgw_cfg.out_types=8'
    ])
    assert 'Input shape:  1 x 3 x 128 x 128' in capsys.readouterr().out
    seg = Config(dict(default_scope='mmseg', crop_size=(96, 160), model={}))
    assert check_shape(None, seg) == (96, 160)
    det = Config(dict(default_scope='mmdet', crop_size=(96, 160), model={}))
    assert check_shape(None, det) == DETECTOR_SHAPE == (800, 1333)
    assert check_shape(['64'], seg) == (64, 64)
    # No size to read: the user is asked for one, not given a detector's.
    bare = Config(
        dict(default_scope='mmseg',
             model=dict(data_preprocessor=dict(size=None))))
    with pytest.raises(
            ValueError, match='neither model.data_preprocessor'
            r'.size nor crop_size: give the input size as --shape'):
        check_shape(None, bare)
    assert check_shape([32, 48], bare) == (32, 48)


def test_config_of_another_scope_is_refused(tmp_path):
    config = tmp_path / 'classifier.py'
    config.write_text("default_scope = 'mmpretrain'\nmodel = dict()\n")
    with pytest.raises(
            ValueError, match=r"classifier.py: default_scope must "
            r"be one of \('mmdet', 'mmseg'\), got 'mmpretrain'"):
        main([str(config), '--shape', '32'])
    config.write_text("default_scope = 'mmseg'\n")
    with pytest.raises(
            ValueError, match='classifier.py: the config has no '
            'model dict, got model = None'):
        main([str(config), '--shape', '32'])


@pytest.mark.parametrize('shape', [['0', '5'], ['1', '2', '3']])
def test_bad_shape_is_refused(shape):
    with pytest.raises(ValueError, match='shape'):
        main([SEG_HGW, '--shape', *shape])


def test_cfg_options_that_set_nothing_are_refused():
    with pytest.raises(ValueError, match='  model.backbone.hgw_cfg.in_types'):
        main([
            SEG_HGW, '--shape', '32', '48', '--cfg-options',
            'hgw_cfg.in_types=8'
        ])
