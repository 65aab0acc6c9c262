"""tools/analysis/routing_knockout.py: a trained segmentor's capsule layers
changed at test time."""
import json

import pytest
import torch

from mmhgw.config_utils import (build_config_model, checkpoint_metrics,
                                load_offline_config)
from mmhgw.models.layers import HGWCaps
from tools.analysis.routing_knockout import (calibration_plans,
                                             capsule_layers_changed, main)


def test_changes_reach_every_capsule_layer(seg_config):
    torch.manual_seed(0)
    model = build_config_model(load_offline_config(seg_config)).eval()
    layers = [m for m in model.modules() if isinstance(m, HGWCaps)]
    assert layers and all(layer.routing == 'hgw' for layer in layers)
    x = torch.randn(1, 3, 64, 64)
    with torch.no_grad():
        before = model.backbone(x)[-1]
        capsule_layers_changed('swap')(model)
        assert all(layer.routing == 'uniform' for layer in layers)
        swapped = model.backbone(x)[-1]
        capsule_layers_changed('swap')(model)
        assert all(layer.routing == 'hgw' for layer in layers)
        capsule_layers_changed('flat')(model)
        flat = model.backbone(x)[-1]
    assert not torch.allclose(before, swapped)
    assert not torch.allclose(before, flat)
    with pytest.raises(ValueError, match='no HGWCaps layer'):
        capsule_layers_changed('flat')(torch.nn.Linear(2, 2))


def test_fixed_at_the_uniform_plan_is_the_swap(seg_config):
    """Every layer routed by the plan p q^T everywhere is the HGW model
    swapped to uniform routing."""
    cfg = load_offline_config(seg_config)
    torch.manual_seed(0)
    model = build_config_model(cfg).eval()
    torch.manual_seed(0)
    swapped = build_config_model(cfg).eval()
    capsule_layers_changed('swap')(swapped)
    layers = {n: m for n, m in model.named_modules() if isinstance(m, HGWCaps)}
    uniform = {
        n: torch.full((m.out_types, m.in_types, m.num_parts),
                      1 / (m.in_types * m.num_parts))
        for n, m in layers.items()
    }
    x = torch.randn(1, 3, 64, 64)
    with torch.no_grad():
        before = model.backbone(x)[-1]
        capsule_layers_changed('fixed', uniform)(model)
        torch.testing.assert_close(
            model.backbone(x)[-1],
            swapped.backbone(x)[-1])
    assert not torch.allclose(before, swapped.backbone(x)[-1])
    missing = dict(list(uniform.items())[1:])
    with pytest.raises(ValueError, match='a plan for every capsule layer'):
        capsule_layers_changed('fixed', missing)(model)


def test_fixed_scores_the_calibrated_plans(seg_config, seg_checkpoint,
                                           tmp_path):
    """``--changes fixed`` scores the model routed by its mean plans over
    the given training batches, the same plans on every call."""
    first = calibration_plans(seg_config, seg_checkpoint, None, 1)
    again = calibration_plans(seg_config, seg_checkpoint, None, 1)
    assert first.keys() == again.keys()
    for name in first:
        torch.testing.assert_close(first[name], again[name])
    out = tmp_path / 'fixed.json'
    main([
        '--model', 'hgw', seg_config, seg_checkpoint, '--changes', 'fixed',
        '--calib-batches', '1', '--metric', 'mIoU', 'aAcc', '--out',
        str(out)
    ])
    scores = json.loads(out.read_text())['results']['hgw']['fixed']
    plain = checkpoint_metrics(
        seg_config, seg_checkpoint,
        change_model=capsule_layers_changed('fixed', first))
    for metric in ('mIoU', 'aAcc'):
        assert scores[metric] == pytest.approx([plain[metric]])
    with pytest.raises(SystemExit, match='--calib-batches must be at least'):
        main([
            '--model', 'hgw', seg_config, seg_checkpoint, '--changes', 'fixed',
            '--calib-batches', '0', '--out',
            str(out)
        ])


def test_scores_equal_the_layers_configured_so(seg_config, seg_checkpoint,
                                               seg_checkpoint_copy, tmp_path):
    """Swapped to uniform routing, or with flat activations, the test score
    is the one of the same checkpoint configured that way."""
    out = tmp_path / 'knockout.json'
    main([
        '--model', 'hgw', seg_config, seg_checkpoint, '--model', 'hgw',
        seg_config, seg_checkpoint_copy, '--metric', 'mIoU', 'aAcc', '--out',
        str(out)
    ])
    result = json.loads(out.read_text())
    assert result['changes'] == ['swap', 'flat']
    scores = result['results']['hgw']
    assert set(scores) == {'trained', 'swap', 'flat'}
    caps = 'model.backbone.hgw_cfg.'
    for change, option in [('trained', {}),
                           ('swap', {caps + 'routing': 'uniform'}),
                           ('flat', {caps + 'temperature': 1e30})]:
        plain = checkpoint_metrics(seg_config, seg_checkpoint, option)
        for metric in ('mIoU', 'aAcc'):
            assert scores[change][metric] == pytest.approx([plain[metric]] *
                                                           2), (change, metric)


def test_unknown_metric_and_missing_checkpoint_are_named(
        seg_config, seg_checkpoint, tmp_path, capsys):
    with pytest.raises(KeyError, match='--metric nope'):
        main([
            '--model', 'a', seg_config, seg_checkpoint, '--changes', 'flat',
            '--metric', 'nope', '--out',
            str(tmp_path / 'x.json')
        ])
    with pytest.raises(SystemExit):
        main([
            '--model', 'a', seg_config,
            str(tmp_path / 'nope.pth'), '--out',
            str(tmp_path / 'x.json')
        ])
    err = capsys.readouterr().err
    assert 'checkpoint' in err and 'nope.pth' in err


def test_one_trained_model_given_twice_is_refused(seg_config, seg_checkpoint,
                                                  tmp_path, capsys):
    """The same checkpoint under two ``--model`` entries (one model
    counted as two seeds), or a change named twice, ends the tool before
    any model runs, naming the option."""
    out = ['--out', str(tmp_path / 'x.json')]
    with pytest.raises(SystemExit):
        main([
            '--model', 'a', seg_config, seg_checkpoint, '--model', 'b',
            seg_config, seg_checkpoint, *out
        ])
    assert '--model b: checkpoint' in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main([
            '--model', 'a', seg_config, seg_checkpoint, '--changes', 'flat',
            'swap', 'flat', *out
        ])
    assert "--changes names 'flat' twice" in capsys.readouterr().err
    assert not (tmp_path / 'x.json').exists()


def test_interrupted_run_keeps_finished_models(tmp_path, monkeypatch):
    import mmhgw.config_utils

    def fake_metrics(config, checkpoint, options, change_model=None):
        if checkpoint.endswith('b.pth'):
            raise RuntimeError('killed')
        return {'mIoU': 60.0 if change_model is None else 55.0}

    monkeypatch.setattr(mmhgw.config_utils, 'checkpoint_metrics', fake_metrics)
    for name in ('a.pth', 'b.pth'):
        (tmp_path / name).write_text('')
    out = tmp_path / 'k.json'
    with pytest.raises(RuntimeError, match='killed'):
        main([
            '--model', 'x', __file__,
            str(tmp_path / 'a.pth'), '--model', 'x', __file__,
            str(tmp_path / 'b.pth'), '--changes', 'flat', '--out',
            str(out)
        ])
    saved = json.loads(out.read_text())
    assert saved['partial'] is True
    assert saved['results'] == {
        'x': {'trained': {'mIoU': [60.0]}, 'flat': {'mIoU': [55.0]}}
    }
