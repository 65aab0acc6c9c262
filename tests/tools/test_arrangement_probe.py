"""tools/analysis/arrangement_probe.py: every variant trains and is scored,
the report pairs them by seed, and bad arguments name themselves."""
import json

import pytest
import torch

from tools.analysis.arrangement_probe import (grid_report, main, probe_network,
                                              report, rotation_report)

SMALL = [
    '--steps', '2', '--batch', '4', '--train', '8', '--test', '6', '--size',
    '16', '--channels', '8', '--types', '4', '--layer-cfg', 'num_parts=2',
    'part_dim=2'
]


@pytest.mark.parametrize('variant', ['stock', 'hgw', 'uniform'])
def test_the_layer_under_test_gets_the_task_gradient(variant):
    model = probe_network(variant, channels=8, types=4,
                          layer_cfg=dict(num_parts=2, part_dim=2))
    layer = model[9]
    assert type(layer).__name__ == ('Conv2d'
                                    if variant == 'stock' else 'HGWCaps')
    if variant != 'stock':
        assert layer.routing == variant
    out = model(torch.randn(2, 3, 16, 16))
    assert out.shape == (2, 2)
    out.sum().backward()
    weight = layer.weight if variant == 'stock' else layer.embed.weight
    assert weight.grad.abs().sum() > 0


@pytest.mark.parametrize('count', [2, 3])
def test_capsule_layers_replace_the_last_convolutions(count):
    cfg = dict(channels=8, types=4, layer_cfg=dict(num_parts=2, part_dim=2))
    stock = probe_network('stock', capsule_layers=count, **cfg)
    model = probe_network('hgw', capsule_layers=count, **cfg)
    under_test = [3, 6, 9][3 - count:]
    for index in (0, 3, 6, 9):
        kind = type(model[index]).__name__
        assert kind == ('HGWCaps' if index in under_test else 'Conv2d')
        assert type(stock[index]).__name__ == 'Conv2d'
    x = torch.randn(2, 3, 16, 16)
    assert model[:12](x).shape == stock[:12](x).shape == (2, 8, 4, 4)
    model(x).sum().backward()
    for index in under_test:
        assert model[index].embed.weight.grad.abs().sum() > 0


def test_runs_are_written_and_paired(tmp_path, capsys):
    out = tmp_path / 'probe.json'
    main(SMALL + ['--seeds', '0', '1', '--json', str(out)])
    runs = json.loads(out.read_text())['runs']
    assert [(r['variant'], r['seed']) for r in runs
            ] == [(v, s) for s in (0, 1) for v in ('stock', 'hgw', 'uniform')]
    for r in runs:
        assert 0 <= r['test_accuracy'] <= 1 and r['final_loss'] > 0
        assert 0 <= r['test_accuracy_recomputed_bn'] <= 1
    text = capsys.readouterr().out
    assert text.count('| hgw minus uniform |') == 2 and '| stock |' in text
    assert 'With BN statistics recomputed' in text


def test_report_pairs_by_seed():
    runs = [
        dict(variant='hgw', seed=0, test_accuracy=0.9, train_accuracy=1,
             seconds=1),
        dict(variant='hgw', seed=1, test_accuracy=0.8, train_accuracy=1,
             seconds=1),
        dict(variant='uniform', seed=1, test_accuracy=0.7, train_accuracy=1,
             seconds=1),
        dict(variant='uniform', seed=2, test_accuracy=0.1, train_accuracy=1,
             seconds=1),
    ]
    text = report(runs, ['hgw', 'uniform'])
    # Only seed 1 is in both: one difference, +10 points, no interval.
    assert '| hgw minus uniform | n/a | +10.0 |' in text
    assert '| hgw | 85.00 ± 7.07 | 90.0, 80.0 |' in text


def test_rotated_test_sets_are_scored_and_their_drops_paired(tmp_path, capsys):
    out = tmp_path / 'probe.json'
    main(SMALL + [
        '--variants', 'stock', 'hgw', '--seeds', '0', '--train-angles', '-15',
        '15', '--test-rotations', '0', '90', '90', '22.5', '--json',
        str(out)
    ])
    (run, _) = json.loads(out.read_text())['runs']
    assert sorted(run['rotated_accuracy']) == ['22.5', '90']
    text = capsys.readouterr().out
    assert '| variant | 0° | 90° | 22.5° | mean of the turned |' in text
    assert '| drop, hgw minus stock |' in text


def test_pool_reports_runs_of_one_setting_and_refuses_two(tmp_path, capsys):

    def write(name, seeds, **extra):
        args = dict(dict(steps=2, test_rotations=[0, 90]), **extra)
        args['seeds'] = seeds
        runs = [
            dict(variant=v, seed=s, test_accuracy=0.9, train_accuracy=1,
                 test_accuracy_recomputed_bn=0.9, seconds=1,
                 rotated_accuracy={'90': 0.5 + s / 10}) for s in seeds
            for v in ('stock', 'hgw')
        ]
        (tmp_path / name).write_text(json.dumps(dict(args=args, runs=runs)))
        return str(tmp_path / name)

    a, b = write('a.json', [0, 1]), write('b.json', [2], threads=1)
    main(['--pool', a, b, '--image', str(tmp_path / 'rot.png')])
    assert (tmp_path / 'rot.png').stat().st_size > 0
    text = capsys.readouterr().out
    assert '| hgw | 90.00 ± 0.00 | 90.0, 90.0, 90.0 |' in text
    assert '| drop, hgw minus stock |  | +0.00 [' in text
    assert 'uniform' not in text.split('Under rotation')[1]
    with pytest.raises(SystemExit, match=r"differ in \['steps'\]"):
        main(['--pool', a, write('c.json', [3], steps=5)])
    with pytest.raises(SystemExit, match='stock seed 1 is in both'):
        main(['--pool', a, write('d.json', [1])])
    with pytest.raises(SystemExit, match='not tested under rotation'):
        main([
            '--pool',
            write('f.json', [5], test_rotations=[0]), '--image',
            str(tmp_path / 'none.png')
        ])
    # A file from before --capsule-layers existed counts as its default.
    main(['--pool', a, write('g.json', [6], capsule_layers=1)])
    with pytest.raises(SystemExit, match=r"differ in \['capsule_layers'\]"):
        main(['--pool', a, write('h.json', [7], capsule_layers=2)])
    (tmp_path / 'e.json').write_text('{"runs": []}')
    with pytest.raises(SystemExit, match='e.json is not a run file'):
        main(['--pool', a, str(tmp_path / 'e.json')])


def test_rotation_report_pairs_the_drops_by_seed():

    def run(variant, seed, plain, turned):
        return dict(variant=variant, seed=seed, test_accuracy=plain,
                    rotated_accuracy={'90': turned})

    runs = [
        run('hgw', 0, 0.9, 0.8),
        run('hgw', 1, 0.9, 0.7),
        run('stock', 0, 1.0, 0.5),
        run('stock', 1, 0.8, 0.6),
        run('stock', 2, 0.8, 0.0)
    ]
    text = rotation_report(runs, ['stock', 'hgw'], [0, 90])
    assert '| hgw | 90.0 ± 0.0 | 75.0 ± 7.1 | 75.0 ± 7.1 |' in text
    # Drops: hgw 10 and 20 points, stock 50 and 20 (seed 2 is unpaired).
    assert '| drop, hgw minus stock |  | -20.00 [' in text


def test_grid_runs_score_every_test_range_and_report_the_grid(
        tmp_path, capsys):
    files = []
    for width in (0, 30):
        files.append(str(tmp_path / f'w{width}.json'))
        main(SMALL + [
            '--variants', 'stock', 'hgw', '--seeds', '0', '1',
            '--train-angles', f'-{width}', f'{width}', '--test-ranges', '0',
            '30', '180', '--json', files[-1]
        ])
        for run in json.loads(open(files[-1]).read())['runs']:
            assert sorted(run['range_accuracy']) == ['0', '180', '30']
            # The test range of the training range is the plain test set.
            assert run['range_accuracy'][str(width)] == run['test_accuracy']
    capsys.readouterr()
    main(['--grid'] + files + ['--image', str(tmp_path / 'grid.png')])
    assert (tmp_path / 'grid.png').stat().st_size > 0
    text = capsys.readouterr().out
    assert ('| variant, trained at | tested ±0° | tested ±30° | '
            'tested ±180° |') in text
    assert '| hgw, ±30° |' in text and '| hgw minus stock |' in text
    assert 'uniform' not in text


def test_grid_refuses_what_is_no_grid(tmp_path):

    def write(name, train, tests=(0, 30), seeds=(0, ), **extra):
        args = dict(train_angles=list(train), test_ranges=list(tests),
                    seeds=list(seeds), **extra)
        runs = [dict(variant='hgw', seed=s, range_accuracy={}) for s in seeds]
        (tmp_path / name).write_text(json.dumps(dict(args=args, runs=runs)))
        return str(tmp_path / name)

    a = write('a.json', (0, 0))
    with pytest.raises(SystemExit, match='trains at ranges'):
        main(['--grid', a, write('b.json', (0, 30))])
    with pytest.raises(SystemExit, match=r'was not scored there'):
        main(['--grid', a, write('c.json', (-60, 60))])
    with pytest.raises(SystemExit, match=r"differ in \['steps'\]"):
        main(['--grid', a, write('d.json', (-30, 30), steps=7)])
    with pytest.raises(SystemExit, match='hgw seed 0 is in both'):
        main(['--grid', a, write('e.json', (0, 0))])
    with pytest.raises(SystemExit, match='f.json is not a run file'):
        (tmp_path / 'f.json').write_text('{}')
        main(['--grid', a, str(tmp_path / 'f.json')])


def test_grid_report_pairs_the_scores_by_seed():

    def run(variant, seed, **accuracy):
        return dict(variant=variant, seed=seed,
                    range_accuracy={k[1:]: v
                                    for k, v in accuracy.items()})

    by_width = {
        0: [
            run('hgw', 0, w0=1.0, w90=0.6),
            run('hgw', 1, w0=1.0, w90=0.8),
            run('stock', 0, w0=1.0, w90=0.5),
            run('stock', 1, w0=0.9, w90=0.5)
        ],
        90: [
            run('hgw', 0, w0=0.9, w90=0.9),
            run('hgw', 1, w0=0.9, w90=0.9),
            run('stock', 0, w0=0.8, w90=0.8),
            run('stock', 1, w0=0.8, w90=0.8),
            run('stock', 2, w0=0.8, w90=0.8)  # seed 2: one range only
        ]
    }
    text = grid_report(by_width, [0, 90], ['stock', 'hgw'])
    assert '| hgw, ±0° | 100.0 ± 0.0 | 70.0 ± 14.1 |' in text
    # Grid means: hgw 85, 90; stock 77.5, 75. Drops (only ±0 has a wider
    # range): hgw 40, 20; stock 50, 40.
    assert '| hgw | 87.5 ± 3.5 | 30.0 ± 14.1 | 2 |' in text
    assert '| stock | 76.2 ± 1.8 | 45.0 ± 7.1 | 2 |' in text
    assert '| hgw minus stock | +11.25 [' in text
    assert '| -15.00 [' in text
    # By training range, only ±0 has a wider test range: the same drops,
    # paired per seed (hgw minus stock: -10 and -20).
    assert '| trained ±0° |\n' in text and 'trained ±90°' not in text
    assert text.endswith('| hgw minus stock | -15.00 [-78.53, +48.53] |')


@pytest.mark.parametrize('args,message', [
    (['--types', '3'], '--types (3) must divide --channels (8)'),
    (['--layer-cfg', 'routing=hgw'], "--layer-cfg cannot set ['routing']"),
    (['--layer-cfg', 'temperature=-1'], '--layer-cfg: '),
    (['--steps', '0'], '--steps must be >= 1'),
    (['--batch', '9'], '--batch (9) must not exceed --train (8)'),
    (['--train-angles', '10', '0'], '--train-angles: angles must be finite'),
    (['--test-rotations', 'inf'], '--test-rotations must be finite'),
    (['--image', 'x.png'], '--image charts accuracy against the rotation'),
    (['--test-ranges', '-5'], '--test-ranges must be finite half-widths'),
    (['--pool', 'a.json', '--grid', 'b.json'], '--pool and --grid are two'),
    (['--capsule-layers', '4'], '--capsule-layers must be 1 to 3, got 4'),
    (['--seeds', '3', '3'], '--seeds names 3 twice'),
    (['--capsule-layers', '3', '--types', '8'
      ], '--types (8) must divide half of --channels (4)'),
])
def test_bad_arguments_name_themselves(args, message, capsys):
    with pytest.raises(SystemExit) as err:
        main(SMALL + args)
    assert err.value.code == 2
    assert message in capsys.readouterr().err
