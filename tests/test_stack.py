"""The OpenMMLab stack is real: compiled ops, package-scoped configs, plugin
import through ``custom_imports``."""
import subprocess
import sys
import textwrap

import pytest
import torch
from mmengine import Config


def test_mmcv_roi_align_matches_bilinear_on_linear_map():
    from mmcv.ops import roi_align

    # f(y, x) = 2x + 3y + 1: bilinear sampling reproduces it exactly, so each
    # bin's average equals f at the bin centre.
    H, W = 12, 16
    ys, xs = torch.meshgrid(torch.arange(H, dtype=torch.float32),
                            torch.arange(W, dtype=torch.float32),
                            indexing='ij')
    feat = (2 * xs + 3 * ys + 1)[None, None]
    rois = torch.tensor([[0, 2.0, 3.0, 10.0, 9.0]])
    out = roi_align(feat, rois, (3, 4), 1.0, 2, 'avg', True)
    x1, y1, x2, y2 = 2.0 - 0.5, 3.0 - 0.5, 10.0 - 0.5, 9.0 - 0.5
    cx = x1 + (torch.arange(4) + 0.5) * (x2 - x1) / 4
    cy = y1 + (torch.arange(3) + 0.5) * (y2 - y1) / 3
    expected = 2 * cx[None, :] + 3 * cy[:, None] + 1
    torch.testing.assert_close(out[0, 0], expected)


def test_mmcv_nms_known_answer():
    from mmcv.ops import nms

    boxes = torch.tensor(
        [[0, 0, 10, 10], [1, 1, 11, 11], [20, 20, 30, 30], [0, 0, 10, 5]],
        dtype=torch.float32)
    scores = torch.tensor([0.9, 0.8, 0.7, 0.6])
    dets, keep = nms(boxes, scores, iou_threshold=0.5)
    # box 1 overlaps box 0 with IoU 81/119 = 0.68; box 3 with IoU 0.5 exactly
    # is kept (suppression needs IoU > threshold).
    assert keep.tolist() == [0, 2, 3]
    torch.testing.assert_close(dets[:, 4], scores[[0, 2, 3]])


@pytest.mark.parametrize('base,backbone,scope', [
    ('mmdet::mask_rcnn/mask-rcnn_r50_fpn_1x_coco.py', 'ResNet', 'mmdet'),
    ('mmseg::deeplabv3plus/deeplabv3plus_r50-d8_4xb4-20k_voc12aug-512x512.py',
     'ResNetV1c', 'mmseg'),
])
def test_package_scoped_base_configs_resolve(tmp_path, base, backbone, scope):
    cfg_file = tmp_path / 'cfg.py'
    cfg_file.write_text(f'_base_ = [{base!r}]\n')
    cfg = Config.fromfile(str(cfg_file))
    assert cfg.model.backbone.type == backbone
    assert cfg.default_scope == scope


def test_custom_imports_registers_mmhgw_in_a_fresh_process(tmp_path):
    """A config whose only link to mmhgw is ``custom_imports`` builds a stock
    Mask R-CNN whose ResNet uses the HGW capsule layer."""
    cfg_file = tmp_path / 'cfg.py'
    cfg_file.write_text(
        textwrap.dedent("""
        _base_ = ['mmdet::mask_rcnn/mask-rcnn_r50_fpn_1x_coco.py']
        custom_imports = dict(imports=['mmhgw'], allow_failed_imports=False)
        model = dict(backbone=dict(
            init_cfg=None,
            dcn=dict(type='HGWCaps', in_types=16, out_types=16),
            stage_with_dcn=(False, False, True, True)))
    """))
    script = textwrap.dedent(f"""
        import sys
        assert 'mmhgw' not in sys.modules
        from mmengine import Config
        from mmengine.registry import init_default_scope
        cfg = Config.fromfile({str(cfg_file)!r})
        assert 'mmhgw' in sys.modules
        init_default_scope(cfg.default_scope)
        from mmdet.registry import MODELS
        model = MODELS.build(cfg.model)
        names = {{type(m).__name__ for m in model.backbone.modules()}}
        assert 'HGWCaps' in names, names
        print('built', type(model).__name__)
    """)
    out = subprocess.run([sys.executable, '-c', script], capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert 'built MaskRCNN' in out.stdout


def test_mmdet_benchmark_module_imports():
    # mmdet's tools/analysis_tools/benchmark.py runs on this module, which
    # imports psutil (undeclared by mmdet; in requirements/runtime.txt).
    from mmdet.utils.benchmark import DatasetBenchmark, InferenceBenchmark
    assert DatasetBenchmark and InferenceBenchmark
