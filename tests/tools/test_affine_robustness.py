"""tools/analysis/affine_robustness.py: a sweep over a trained segmentor."""
import json
import os.path as osp

import pytest

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


def test_sweep_writes_curves(seg_config, seg_checkpoint, tmp_path):
    out, image = tmp_path / 'rot.json', tmp_path / 'rot.png'
    main([
        '--model', 'a', seg_config, seg_checkpoint, '--model', 'a', seg_config,
        seg_checkpoint, '--sweep', 'rotation', '--values', '0', '45',
        '--metric', 'mIoU', 'mDice', '--out',
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
    plain = evaluate(seg_config, seg_checkpoint, dict(type='AffineWarp'), None)
    assert curve['0.0']['mean'] == pytest.approx(plain['mIoU'])


def test_missing_checkpoint_is_named(seg_config, tmp_path, capsys):
    with pytest.raises(SystemExit):
        main([
            '--model', 'a', seg_config,
            str(tmp_path / 'nope.pth'), '--values', '0', '--out',
            str(tmp_path / 'x.json')
        ])
    err = capsys.readouterr().err
    assert 'checkpoint' in err and 'nope.pth' in err
