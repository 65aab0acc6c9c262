"""tools/analysis/affine_robustness.py: a sweep over a trained segmentor."""
import json
import os.path as osp

import pytest

from tools.analysis.affine_robustness import (evaluate, main, summary, table,
                                              warped_pipeline)


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


def test_sweep_writes_curves(seg_config, seg_checkpoint, seg_checkpoint_copy,
                             tmp_path):
    out, image = tmp_path / 'rot.json', tmp_path / 'rot.png'
    main([
        '--model', 'a', seg_config, seg_checkpoint, '--model', 'a', seg_config,
        seg_checkpoint_copy, '--sweep', 'rotation', '--values', '0', '45',
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


def write_sweep(path, name, runs_by_metric):
    """A JSON as the tool writes it, for ``{metric: {label: {value:
    runs}}}`` (the first metric the plotted one)."""
    first, *others = runs_by_metric
    path.write_text(
        json.dumps(
            dict(sweep=name, metric=first,
                 results=summary(runs_by_metric[first]),
                 others={m: summary(runs_by_metric[m])
                         for m in others})))
    return str(path)


def test_table_pairs_the_changes_model_by_model():
    results = {
        'stock': {'1.0': [70.0, 72.0], '0.5': [60.0, 61.0]},
        'hgw': {'1.0': [69.0, 71.0], '0.5': [64.0, 66.0]},
    }
    rows = table(results, 'scale', 'mIoU', 'stock').splitlines()
    assert rows[0].split(' | ')[2:5] == [
        'mIoU at 0.5', 'mIoU at 1.0', 'change at 0.5'
    ]
    stock = [c.strip() for c in rows[2].split('|')[1:-1]]
    hgw = [c.strip() for c in rows[3].split('|')[1:-1]]
    assert stock[:5] == [
        'stock', '2', '60.50 ± 0.71', '71.00 ± 1.41', '-10.50'
    ]
    assert stock[5] == ''
    # Changes -10, -11 against -5, -5: differences +5 and +6.
    assert hgw[4] == '-5.00'
    assert hgw[5].startswith('+5.50 [')
    # Without the identity value the scores themselves are paired.
    rows = table({k: {'0.5': v['0.5']}
                  for k, v in results.items()}, 'scale', 'mIoU',
                 'stock').splitlines()
    assert 'mIoU - stock, at 0.5' in rows[0]
    assert rows[3].split('|')[-2].strip().startswith('+4.50 [')


def test_merge_joins_earlier_runs(tmp_path):
    a = write_sweep(
        tmp_path / 'a.json', 'shear', {
            'mIoU': {'stock': {'0.0': [70.0, 72.0], '0.5': [60.0, 61.0]}},
            'mDice': {'stock': {'0.0': [80.0, 82.0], '0.5': [75.0, 76.0]}},
        })
    b = write_sweep(
        tmp_path / 'b.json', 'shear', {
            'mIoU': {'hgw': {'0.0': [69.0, 71.0], '0.5': [64.0, 66.0]}},
            'mDice': {'hgw': {'0.0': [79.0, 81.0], '0.5': [76.0, 77.0]}},
        })
    out = tmp_path / 'all.json'
    main(['--merge', a, b, '--reference', 'stock', '--out', str(out)])
    result = json.loads(out.read_text())
    assert result['sweep'] == 'shear' and result['metric'] == 'mIoU'
    assert set(result['results']) == {'stock', 'hgw'}
    assert result['results']['hgw']['0.5']['runs'] == [64.0, 66.0]
    assert set(result['tables']) == {'mIoU', 'mDice'}
    assert '+5.50 [' in result['tables']['mIoU']

    with pytest.raises(ValueError, match="label 'stock'"):
        main(['--merge', a, a, '--out', str(out)])
    c = write_sweep(tmp_path / 'c.json', 'scale',
                    {'mIoU': {'x': {'1.0': [1.0]}}, 'mDice': {'x': {}}})
    with pytest.raises(ValueError, match='c.json: a scale sweep'):
        main(['--merge', a, c, '--out', str(out)])
    d = write_sweep(tmp_path / 'd.json', 'shear',
                    {'mIoU': {'x': {'0.0': [1.0]}}})
    with pytest.raises(ValueError, match='d.json: metrics'):
        main(['--merge', a, d, '--out', str(out)])
    with pytest.raises(ValueError, match='--reference'):
        main(['--merge', a, '--reference', 'nope', '--out', str(out)])


def test_what_to_test_is_required(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(['--out', str(tmp_path / 'x.json')])
    assert '--model' in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main([
            '--model', 'a', __file__, __file__, '--out',
            str(tmp_path / 'x.json')
        ])
    assert '--values' in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main([
            '--merge',
            str(tmp_path / 'none.json'), '--out',
            str(tmp_path / 'x.json')
        ])
    assert 'none.json' in capsys.readouterr().err


def test_interrupted_sweep_keeps_finished_models(tmp_path, monkeypatch):
    import tools.analysis.affine_robustness as tool
    calls = []

    def fake_evaluate(config, checkpoint, warp, options):
        calls.append(checkpoint)
        if checkpoint.endswith('b.pth'):
            raise RuntimeError('killed')
        return {'mIoU': 50.0 + warp.get('scale', 1.0)}

    monkeypatch.setattr(tool, 'evaluate', fake_evaluate)
    for name in ('a.pth', 'b.pth'):
        (tmp_path / name).write_text('')
    out = tmp_path / 'partial.json'
    common = ['--sweep', 'scale', '--values', '0.5', '1.0', '--out', str(out)]
    with pytest.raises(RuntimeError, match='killed'):
        main([
            '--model', 'x', __file__,
            str(tmp_path / 'a.pth'), '--model', 'y', __file__,
            str(tmp_path / 'b.pth'), *common
        ])
    saved = json.loads(out.read_text())
    assert saved['partial'] is True
    assert saved['results']['x']['0.5']['runs'] == [50.5]
    assert 'y' not in saved['results']
    # The saved models join a later run of the others.
    calls.clear()
    monkeypatch.setattr(tool, 'evaluate',
                        lambda c, k, w, o: {'mIoU': 40.0 + w['scale']})
    final = tmp_path / 'final.json'
    main([
        '--model', 'y', __file__,
        str(tmp_path / 'a.pth'), '--merge',
        str(out), '--reference', 'x', '--sweep', 'scale', '--values', '0.5',
        '1.0', '--out',
        str(final)
    ])
    result = json.loads(final.read_text())
    assert set(result['results']) == {'x', 'y'} and 'partial' not in result
    assert '| y | 1 |' in result['tables']['mIoU']


def test_refusals_come_before_any_model_runs(tmp_path, monkeypatch):
    import tools.analysis.affine_robustness as tool

    def must_not_run(*args):
        raise AssertionError('a model was evaluated before the checks')

    monkeypatch.setattr(tool, 'evaluate', must_not_run)
    model = [
        '--model', 'x', __file__, __file__, '--values', '0', '--out',
        str(tmp_path / 'x.json')
    ]
    with pytest.raises(ValueError, match='--reference'):
        main([*model, '--reference', 'stock'])
    earlier = write_sweep(tmp_path / 'e.json', 'rotation',
                          {'mIoU': {'x': {'0.0': [1.0]}}})
    with pytest.raises(ValueError, match='--model x'):
        main([*model, '--merge', earlier])
    with pytest.raises(ValueError, match='--metric'):
        main([*model, '--merge', earlier, '--metric', 'mDice'])


def test_a_value_named_twice_is_refused(tmp_path, capsys):
    """A sweep value named twice would count its models twice."""
    with pytest.raises(SystemExit):
        main([
            '--model', 'x', __file__, __file__, '--values', '0', '30', '0',
            '--out',
            str(tmp_path / 'x.json')
        ])
    assert '--values names 0.0 twice' in capsys.readouterr().err


def test_option_that_would_set_nothing_is_refused(seg_config, seg_checkpoint):
    # data_root is a variable of the config file: merged plainly it would
    # change nothing, and the sweep would score the default data.
    with pytest.raises(ValueError, match='data_root'):
        evaluate(seg_config, seg_checkpoint, dict(type='AffineWarp'),
                 {'data_root': '/elsewhere'})
