"""ONNX export (tools/deployment/pytorch2onnx.py, mmhgw.deployment): HGWCaps
backbones, segmentors and detectors in standard operations, run by
onnxruntime and compared with PyTorch."""
import os.path as osp
import textwrap

import pytest
import torch

pytest.importorskip('onnx')
pytest.importorskip('onnxscript')
pytest.importorskip('onnxruntime')

import onnx  # noqa: E402

from mmhgw.deployment import NotExportableError, export_onnx  # noqa: E402
from mmhgw.models import HGWCaps  # noqa: E402
from mmhgw.models.backbones import HGWCapsResNet  # noqa: E402
from tools.deployment.pytorch2onnx import main  # noqa: E402

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))

SEG_HGW = osp.join(ROOT, 'configs/demo/unet-hgwcaps-s5-d16_fcn_demo-isic.py')
#: Narrow layers and few solver iterations: the reference unrolls every
#: iteration into the graph, and the export's time grows with its size.
SEG_OPTIONS = [
    'model.backbone.base_channels=16', 'model.decode_head.in_channels=16',
    'model.decode_head.channels=16', 'model.auxiliary_head.in_channels=32',
    'model.auxiliary_head.channels=16', 'model.backbone.hgw_cfg.in_types=8',
    'model.backbone.hgw_cfg.out_types=8',
    'model.backbone.hgw_cfg.outer_iters=1',
    'model.backbone.hgw_cfg.inner_iters=2'
]
RETINANET_HGW = textwrap.dedent('''
    _base_ = 'mmdet::retinanet/retinanet_r50_fpn_1x_coco.py'
    custom_imports = dict(imports=['mmhgw'], allow_failed_imports=False)
    model = dict(
        backbone=dict(
            type='HGWCapsResNet', depth=18, base_channels=8, init_cfg=None,
            stage_with_hgw=(False, False, False, True),
            hgw_cfg=dict(type='HGWCaps', in_types=4, out_types=4,
                         num_parts=3, part_dim=4, outer_iters=1,
                         inner_iters=2)),
        neck=dict(in_channels=[8, 16, 32, 64], out_channels=16),
        bbox_head=dict(in_channels=16, feat_channels=16, stacked_convs=1))
''')


def standard_only(proto, opset):
    """The file holds standard ONNX operations at ``opset`` only."""
    onnx.checker.check_model(proto)
    assert [(o.domain, o.version) for o in proto.opset_import] == [('', opset)]
    assert all(node.domain == '' for node in proto.graph.node)


def test_segmentor_exports_and_matches_pytorch(tmp_path, capsys):
    out = str(tmp_path / 'unet.onnx')
    proto, errors = main([
        SEG_HGW, '--out', out, '--shape', '32', '--verify', '--cfg-options',
        *SEG_OPTIONS
    ])
    standard_only(onnx.load(out), 17)
    assert len(errors) == 1 and errors[0] < 1e-4
    assert 'onnxruntime matches PyTorch' in capsys.readouterr().out


def test_detector_exports_and_matches_pytorch(tmp_path):
    """At the exporter's own opset (no version conversion)."""
    config = tmp_path / 'retinanet_hgwcaps.py'
    config.write_text(RETINANET_HGW)
    out = str(tmp_path / 'retinanet.onnx')
    proto, errors = main([
        str(config), '--out', out, '--shape', '64', '--opset', '18', '--verify'
    ])
    standard_only(onnx.load(out), 18)
    # Class scores and box deltas of five FPN levels.
    assert len(errors) == 10 and max(errors) < 1e-4


def test_backbone_only_exports_the_backbone(tmp_path, monkeypatch):
    """The backbone alone (the whole-model exports above hold it too)."""
    import tools.deployment.pytorch2onnx as tool
    config = tmp_path / 'retinanet_hgwcaps.py'
    config.write_text(RETINANET_HGW)
    seen = {}

    def fake_export(module, args, path, **kwargs):
        seen.update(module=module, shape=tuple(args[0].shape), **kwargs)
        return onnx.ModelProto()

    monkeypatch.setattr(tool, 'export_onnx', fake_export)
    main([
        str(config), '--out',
        str(tmp_path / 'b.onnx'), '--shape', '32', '48', '--backbone-only'
    ])
    assert isinstance(seen['module'], HGWCapsResNet)
    assert seen['shape'] == (1, 3, 32, 48) and seen['opset_version'] == 17


class DataDependent(torch.nn.Module):

    def forward(self, x):
        return x if x.sum() > 0 else -x


def test_position_components_export_at_the_default_opset(tmp_path):
    # Their patch copy keeps zero padding inside a convolution: no Pad node
    # that the version converter could not take down to opset 17.
    from mmhgw.deployment import run_onnx
    torch.manual_seed(0)
    layer = HGWCaps(16, 8, 3, padding=1, in_types=4, out_types=4, num_parts=3,
                    part_dim=4, components='positions',
                    pose_from='mean_plus_components', component_norm=True,
                    solver_cfg=dict(outer_iters=1, inner_iters=2)).eval()
    torch.nn.init.normal_(layer.component_pose_weight)
    x = torch.randn(1, 16, 6, 7)
    path = str(tmp_path / 'layer.onnx')
    standard_only(export_onnx(layer, (x, ), path), 17)
    with torch.no_grad():
        expected = layer(x)
    torch.testing.assert_close(torch.as_tensor(run_onnx(path, [x])[0]),
                               expected, rtol=1e-4, atol=1e-5)


def test_an_untraceable_model_is_refused_naming_it(tmp_path):
    with pytest.raises(NotExportableError,
                       match='torch.export cannot trace DataDependent'):
        export_onnx(DataDependent(), (torch.randn(3), ),
                    str(tmp_path / 'x.onnx'))
    with pytest.raises(ValueError, match='opset_version must be >= 17'):
        export_onnx(DataDependent(), (torch.randn(3), ),
                    str(tmp_path / 'x.onnx'), opset_version=16)


def test_a_checkpoint_of_another_width_is_refused_naming_it(tmp_path):
    from mmhgw.config_utils import build_config_model, load_offline_config
    from mmhgw.engine.hooks.checkpoint_fit import CheckpointMismatch
    cfg = load_offline_config(SEG_HGW)
    narrow = {k: int(v) for k, v in (o.split('=') for o in SEG_OPTIONS[:7])}
    cfg.merge_from_dict(narrow)
    ckpt = str(tmp_path / 'narrow.pth')
    torch.save(dict(state_dict=build_config_model(cfg).state_dict()), ckpt)
    # The run's width left out of --cfg-options: refused before export.
    with pytest.raises(CheckpointMismatch, match=f'^{ckpt} does not fit'):
        main([
            SEG_HGW, '--out',
            str(tmp_path / 'x.onnx'), '--shape', '64', '64', '--checkpoint',
            ckpt, '--cfg-options', 'model.backbone.hgw_cfg.outer_iters=1'
        ])
    assert not (tmp_path / 'x.onnx').exists()


def test_cfg_options_that_set_nothing_are_refused(tmp_path):
    """An option naming a key the model does not read (here a top-level
    variable) is refused before export, not exported without it."""
    with pytest.raises(ValueError, match='  model.backbone.hgw_cfg.in_types'):
        main([
            SEG_HGW, '--out',
            str(tmp_path / 'x.onnx'), '--shape', '64', '64', '--cfg-options',
            'hgw_cfg.in_types=8'
        ])
    assert not (tmp_path / 'x.onnx').exists()
