"""tools/analysis/affine_robustness.py: a sweep over a trained segmentor."""
import json
import os.path as osp

import pytest
import torch

from mmhgw.config_utils import build_config_model, load_offline_config
from tools.analysis.affine_robustness import evaluate, main, warped_pipeline


def test_warp_goes_after_every_loader():
    pipeline = [
        dict(type='LoadImageFromFile'),
        dict(type='Resize'),
        dict(type='LoadAnnotations'),
        dict(type='PackSegInputs')
    ]
    warp = dict(type='AffineWarp', angle=30)
    out = warped_pipeline(pipeline, warp)
    assert [s['type'] for s in out] == [
        'LoadImageFromFile', 'AffineWarp', 'Resize', 'LoadAnnotations',
        'AffineWarp', 'PackSegInputs'
    ]
    with pytest.raises(ValueError, match='LoadImageFromFile'):
        warped_pipeline([dict(type='Resize')], warp)


@pytest.fixture
def config(reduced_seg_config, tmp_path):
    return str(reduced_seg_config(tmp_path, num_train=2, num_val=2))


@pytest.fixture
def checkpoint(config, tmp_path):
    cfg = load_offline_config(config)
    model = build_config_model(cfg)
    path = tmp_path / 'model.pth'
    torch.save(dict(state_dict=model.state_dict(), meta={}), path)
    return str(path)


def test_sweep_writes_curves(config, checkpoint, tmp_path):
    out, image = tmp_path / 'rot.json', tmp_path / 'rot.png'
    main([
        '--model', 'a', config, checkpoint, '--model', 'a', config, checkpoint,
        '--sweep', 'rotation', '--values', '0', '45', '--metric', 'mIoU',
        'mDice', '--out',
        str(out), '--image',
        str(image)
    ])
    result = json.loads(out.read_text())
    assert result['sweep'] == 'rotation' and result['metric'] == 'mIoU'
    assert set(result['others']) == {'mDice'}
    assert set(result['others']['mDice']['a']) == {'0.0', '45.0'}
    curve = result['results']['a']
    assert set(curve) == {'0.0', '45.0'}
    for point in curve.values():
        assert len(point['runs']) == 2 and point['std'] == 0
        assert 0 <= point['mean'] <= 100
    assert osp.getsize(image) > 0
    # The identity point is the plain test score.
    plain = evaluate(config, checkpoint, dict(type='AffineWarp'), None)
    assert curve['0.0']['mean'] == pytest.approx(plain['mIoU'])


def test_missing_checkpoint_is_named(config, tmp_path, capsys):
    with pytest.raises(SystemExit):
        main([
            '--model', 'a', config,
            str(tmp_path / 'nope.pth'), '--values', '0', '--out',
            str(tmp_path / 'x.json')
        ])
    err = capsys.readouterr().err
    assert 'checkpoint' in err and 'nope.pth' in err
