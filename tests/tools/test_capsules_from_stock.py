"""tools/model_converters/capsules_from_stock.py on a narrowed UNet
segmentor: end to end through the command line, every capsule layer fitted
closer to the stock layer it replaces, the result loading strictly into the
HGWCaps model, and bad inputs named in the error."""
import os.path as osp
import subprocess
import sys

import pytest
import torch

from mmhgw.config_utils import build_config_model, load_offline_config
from mmhgw.datasets.synthetic import make_isic_lesions
from mmhgw.models import HGWCaps
from mmhgw.testing import logged
from tools.model_converters.capsules_from_stock import main

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
TOOL = osp.join(ROOT, 'tools', 'model_converters', 'capsules_from_stock.py')
STEPS = '10'


@pytest.fixture(scope='module')
def setup(tmp_path_factory):
    """The narrowed HGWCaps UNet config, a stock checkpoint of its stock
    counterpart (whole segmentor and backbone only) and a few images."""
    from conftest import write_reduced_seg_config
    tmp = tmp_path_factory.mktemp('convert')
    config = str(write_reduced_seg_config(tmp, num_train=2, num_val=2))
    cfg = load_offline_config(config)
    for key in ('hgw_cfg', 'enc_with_hgw', 'dec_with_hgw'):
        cfg.model.backbone.pop(key, None)
    cfg.model.backbone.type = 'UNet'
    torch.manual_seed(0)
    stock = build_config_model(cfg)
    whole = str(tmp / 'stock_segmentor.pth')
    torch.save(dict(state_dict=stock.state_dict(), meta={}), whole)
    backbone = str(tmp / 'stock_unet.pth')
    torch.save(stock.backbone.state_dict(), backbone)  # bare, as torchvision
    images = tmp / 'images'
    make_isic_lesions(str(images), num_train=6, num_val=2, size=(64, 64),
                      seed=3)
    return dict(tmp=tmp, config=config, whole=whole, backbone=backbone,
                images=str(images), stock=stock)


def test_cli_end_to_end_whole_segmentor(setup):
    """Through the command line (built-in images by default): errors drop
    for every layer; the checkpoint loads strictly into the HGWCaps
    segmentor, stock layers unchanged, meta naming the source."""
    out = str(setup['tmp'] / 'hgw_segmentor.pth')
    proc = subprocess.run([
        sys.executable, TOOL, setup['whole'], setup['config'], out,
        '--num-images', '4', '--img-size', '64', '64', '--steps', STEPS,
        '--batch-size', '2'
    ], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    # Output to a pipe, as to a log file: no progress bar redrawn with
    # carriage returns, no initialisation table of every parameter.
    assert '\r' not in proc.stdout and 'torch.Size' not in proc.stdout
    ckpt = torch.load(out, map_location='cpu')
    errors = ckpt['meta']['relative_error']
    assert ckpt['meta']['source'] == setup['whole']
    assert ckpt['meta']['scope'] == 'model'
    assert len(errors) == 4  # 2 convs in encoder.4, 2 in decoder.3
    for name, err in errors.items():
        assert err['after'] < err['before'], (name, err)
        assert name in proc.stdout
    model = build_config_model(load_offline_config(setup['config']))
    model.load_state_dict(ckpt['state_dict'], strict=True)
    stock = setup['stock'].state_dict()
    assert torch.equal(ckpt['state_dict']['decode_head.conv_seg.weight'],
                       stock['decode_head.conv_seg.weight'])
    assert torch.equal(
        ckpt['state_dict']['backbone.encoder.0.0.convs.0'
                           '.conv.weight'],
        stock['backbone.encoder.0.0.convs.0.conv.weight'])


def test_backbone_checkpoint_loads_through_init_cfg(setup, tmp_path):
    """A bare backbone checkpoint gives a bare HGWCaps backbone checkpoint
    that the config loads through ``init_cfg=Pretrained`` with every key
    matched and the fitted capsule layers in place."""
    out = str(tmp_path / 'hgw_unet.pth')
    main([
        setup['backbone'], setup['config'], out, '--images', setup['images'],
        '--num-images', '4', '--img-size', '64', '64', '--steps', '2',
        '--batch-size', '2'
    ])
    ckpt = torch.load(out, map_location='cpu')
    assert ckpt['meta']['scope'] == 'backbone'
    cfg = load_offline_config(setup['config'])
    cfg.model.backbone.init_cfg = dict(type='Pretrained', checkpoint=out)
    built = []
    messages = logged(lambda: built.append(build_config_model(cfg)))
    model = built[0]
    # Nothing stays fresh, so nothing is reported as such.
    assert 'stay freshly initialised' not in messages
    got = model.backbone.state_dict()
    assert set(got) == set(ckpt['state_dict'])
    for key, value in ckpt['state_dict'].items():
        assert torch.equal(got[key], value), key
    caps = [
        n for n, m in model.backbone.named_modules() if isinstance(m, HGWCaps)
    ]
    assert all(f'{n}.subcapsules' in ckpt['state_dict'] for n in caps)


def test_missing_files_are_named(setup, tmp_path):
    out = str(tmp_path / 'x.pth')
    with pytest.raises(SystemExit, match='SRC: no such file: .*nope.pth'):
        main([str(tmp_path / 'nope.pth'), setup['config'], out])
    with pytest.raises(SystemExit, match='CONFIG: no such file'):
        main([setup['whole'], str(tmp_path / 'nope.py'), out])
    with pytest.raises(SystemExit, match='--images: no such folder'):
        main([
            setup['whole'], setup['config'], out, '--images',
            str(tmp_path / 'none')
        ])
    with pytest.raises(SystemExit, match='model.backbone.hgw_cfg.outer_iters'):
        main([
            setup['whole'], setup['config'], out, '--cfg-options',
            'hgw_cfg.outer_iters=5'
        ])
    assert not osp.exists(out)


@pytest.mark.parametrize('option,message', [
    (['--lr', 'nan'], '--lr must be a positive finite number, got nan'),
    (['--lr', '0'], '--lr must be a positive finite number, got 0.0'),
    (['--img-size', '0', '32'], 'both sides must be positive multiples of 32'),
    (['--device', 'bogus'], "--device 'bogus'"),
])
def test_bad_options_are_named_before_any_work(setup, tmp_path, option,
                                               message):
    out = str(tmp_path / 'x.pth')
    with pytest.raises(SystemExit) as err:
        main([setup['whole'], setup['config'], out, *option])
    assert message in str(err.value)
    assert not osp.exists(out)


@pytest.mark.skipif(torch.cuda.is_available(), reason='needs a CPU-only torch')
def test_cuda_device_without_cuda_is_named(setup, tmp_path):
    with pytest.raises(SystemExit, match='--device cuda: CUDA is not '
                       'available here'):
        main([
            setup['whole'], setup['config'],
            str(tmp_path / 'x.pth'), '--device', 'cuda'
        ])


def test_wrong_architecture_is_named(setup, tmp_path):
    """A ResNet-18 checkpoint for the UNet config: the error names SRC and
    the missing keys; a config without capsule layers is refused too."""
    from mmdet.models.backbones import ResNet
    wrong = str(tmp_path / 'resnet18.pth')
    torch.save(ResNet(depth=18, base_channels=8).state_dict(), wrong)
    out = str(tmp_path / 'x.pth')
    with pytest.raises(SystemExit) as info:
        main([wrong, setup['config'], out])
    message = str(info.value)
    assert 'resnet18.pth is not a checkpoint of the stock counterpart' \
        in message and 'keys missing' in message
    stock_cfg = tmp_path / 'stock.py'
    stock_cfg.write_text(
        f"_base_ = [{setup['config']!r}]\n"
        "model = dict(backbone=dict(_delete_=True, type='UNet', "
        "base_channels=16))\n")
    with pytest.raises(SystemExit, match='builds no HGW capsule layer'):
        main([setup['whole'], str(stock_cfg), out])
    not_ckpt = tmp_path / 'notes.pth'
    not_ckpt.write_text('not a checkpoint')
    with pytest.raises(SystemExit, match='SRC: cannot read .*notes.pth'):
        main([str(not_ckpt), setup['config'], out])


def test_progress_bar_only_on_a_terminal(monkeypatch):
    import io

    from tools.model_converters.capsules_from_stock import progress

    class Terminal(io.StringIO):

        def isatty(self):
            return True

    for stream, drawn in ((io.StringIO(), False), (Terminal(), True)):
        monkeypatch.setattr(sys, 'stdout', stream)
        with progress(3) as step:
            for _ in range(3):
                step()
        assert ('\r' in stream.getvalue()) == drawn
        assert ('3/3' in stream.getvalue()) == drawn
