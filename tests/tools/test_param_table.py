"""Every HGWCaps config has fewer parameters than its stock counterpart."""
import os.path as osp

from tools.analysis.param_table import count, pairs


def test_counterparts_are_resolved_from_base_files():
    found = {osp.basename(h): s for h, s in pairs()}
    assert len(found) == 17
    assert found['unet-hgwcaps-s5-d16_fcn_crop128.py'].endswith(
        'configs/study/unet-s5-d16_fcn_crop128.py')
    assert found['deeplabv3plus_hgwcaps-r50-d8_crop128.py'].endswith(
        'configs/study/deeplabv3plus_r50-d8_crop128.py')
    assert found['deeplabv3plus_hgwcaps-r50-d8_demo-isic.py'].endswith(
        'configs/demo/deeplabv3plus_r50-d8_demo-isic.py')
    assert found['mask-rcnn_hgwcaps-r50_hgwcaps-fpn_1x_coco.py'] == \
        'mmdet::mask_rcnn/mask-rcnn_r50_fpn_1x_coco.py'
    assert found['unet-hgwcaps-s5-d16_fcn_4xb4-20k_voc12aug-512x512.py'] \
        .endswith('configs/unet/unet-s5-d16_fcn_4xb4-20k_voc12aug-512x512.py')


def test_every_hgw_config_has_fewer_parameters_than_stock():
    cache = {}
    for hgw, stock in pairs():
        for p in (hgw, stock):
            cache.setdefault(p, count(p))
        assert cache[hgw] < cache[stock], (hgw, cache[hgw], cache[stock])
