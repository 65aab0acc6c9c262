"""tools/analysis/ablation_study.py: end to end on a tiny setting (one
variant, two seeds, two iterations each, through the train and test
tools), and its report on given results."""
import argparse
import importlib.util
import json
import os.path as osp
import subprocess
import sys
import threading
import time

import pytest
import torch

from mmhgw.analysis.paired import confidence_interval
from mmhgw.datasets.synthetic import DATA_VERSION, make_isic_lesions

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))


@pytest.fixture(scope='module')
def study():
    spec = importlib.util.spec_from_file_location(
        'ablation_study', osp.join(ROOT, 'tools/analysis/ablation_study.py'))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def merge_options(cfg, options):
    """Merge ``key=value`` strings into ``cfg`` as ``--cfg-options`` does."""
    from mmengine.config import DictAction
    cfg.merge_from_dict({
        k: DictAction._parse_iterable(v)
        for k, v in (o.split('=', 1) for o in options)
    })


def run_study(tmp_path, *extra):
    cmd = [
        sys.executable, 'tools/analysis/ablation_study.py', '--variants',
        'stock', '--seeds', '0', '1', '--data',
        str(tmp_path / 'data'), '--work-dir',
        str(tmp_path / 'work'), '--out',
        str(tmp_path / 'docs' / 'ablations.md'), '--image',
        str(tmp_path / 'docs' / 'images' / 'ablations.png'), '--cfg-options',
        'train_cfg.max_iters=2', 'train_dataloader.batch_size=1', *extra
    ]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-3000:])
    return done.stdout


def test_study_trains_tests_and_reports(tmp_path):
    data = tmp_path / 'data' / 'ISIC2018'
    make_isic_lesions(str(data), num_train=2, num_val=1, size=(64, 64))
    (data / '.complete').write_text(DATA_VERSION)
    out = run_study(tmp_path)
    assert out.count('training 2 iterations') == 2
    values = []
    for seed in (0, 1):
        path = tmp_path / 'work' / 'seg' / 'stock' / f'seed{seed}'
        with open(path / 'result.json') as f:
            result = json.load(f)
        assert result['seed'] == seed and result['iters'] == 2
        assert 0 <= result['metrics']['mIoU'] <= 100
        # The threshold-free scores of the same test run.
        assert 0 <= result['metrics']['AUC'] <= 100
        assert result['metrics']['best-threshold mIoU'] >= \
            result['metrics']['mIoU'] - 0.01  # mIoU is rounded
        assert result['time_per_iter'] > 0
        assert 'cores' in result['machine']  # the processor it trained on
        values.append(result['metrics']['mIoU'])
        # The seed reached the Runner of both tools.
        for tool in ('train', 'test'):
            assert f'seed: {seed}' in (path / f'{tool}.out').read_text()
        # The evaluation is the test tool's alone.
        assert 'Iter(train)' in (path / 'train.out').read_text()
        assert 'Iter(val)' not in (path / 'train.out').read_text()
    report = (tmp_path / 'docs' / 'ablations.md').read_text()
    row = [line for line in report.splitlines() if line.startswith('| stock')]
    assert len(row) == 1 and '±' in row[0]
    assert ', '.join(f'{v:.2f}' for v in values) in row[0]
    assert '](images/ablations.png)' in report
    assert '(2 runs, ' in report  # the runs' own wall time
    assert f'on {result["machine"]} (2 runs)' in report
    image = tmp_path / 'docs' / 'images' / 'ablations.png'
    assert image.stat().st_size > 1000
    assert report.startswith('# Ablation study\n')
    # A second call reuses the finished runs and rewrites its section
    # only: what was written by hand around it stays.
    intro, notes = 'An opening by hand.\n', '\n## Reading\nA null result.\n'
    path = tmp_path / 'docs' / 'ablations.md'
    path.write_text(report.replace('# Ablation study\n', intro) + notes)
    assert 'training 2 iterations' not in run_study(tmp_path)
    report = path.read_text()
    assert report.startswith(intro) and report.endswith(notes)
    assert sum(line.startswith('| stock') for line in report.splitlines()) == 1
    # Another data set's study goes into a section of its own on the page.
    run_study(tmp_path, '--section', 'study-other')
    report = path.read_text()
    assert report.startswith(intro)
    assert sum(line.startswith('| stock') for line in report.splitlines()) == 2
    first, second = report.index('<!-- study:end -->'), report.index(
        '<!-- study-other:begin -->')
    assert first < report.index(notes) < second


def test_jobs_train_seed_by_seed_and_a_failure_stops_no_other_run(
        study, monkeypatch):
    started, running, most = [], set(), [0]
    lock = threading.Lock()

    def fake_run(task, variant, seed, args):
        with lock:
            started.append((variant, seed))
            running.add((variant, seed))
            most[0] = max(most[0], len(running))
        time.sleep(0.2)
        with lock:
            running.discard((variant, seed))
        if (variant, seed) == ('hgw', 0):
            raise SystemExit('test.py failed (1)')
        return dict(variant=variant, seed=seed)

    monkeypatch.setattr(study, 'train_and_test', fake_run)
    monkeypatch.setattr(study, 'model_options', lambda *a: [])
    args = argparse.Namespace(tasks=['seg'], variants=['stock', 'hgw'],
                              seeds=[2, 0, 1], jobs=2)
    with pytest.raises(SystemExit) as failed:
        study.run_all(args)
    assert str(failed.value).startswith('1 of 6 runs failed:')
    assert 'seg hgw seed 0: SystemExit(\'test.py failed (1)\')' in str(
        failed.value)
    # Every run ran, two at a time, each seed's variants before the next
    # seed's, in the order of --seeds.
    assert len(started) == 6 and most[0] == 2
    assert [seed for _, seed in started] == [2, 2, 0, 0, 1, 1]
    monkeypatch.setattr(study, 'train_and_test',
                        lambda t, v, s, a: dict(variant=v, seed=s))
    assert study.run_all(args) == {
        'seg': {
            v: [dict(variant=v, seed=s) for s in (2, 0, 1)]
            for v in ('stock', 'hgw')
        }
    }


def test_report_pairs_seeds_against_hgw(study, tmp_path):

    def result(variant, seed, miou):
        return dict(variant=variant, seed=seed, iters=120,
                    metrics=dict(mIoU=miou, mDice=miou + 5), time_per_iter=2.0)

    results = {
        'stock': [result('stock', 0, 70.0),
                  result('stock', 1, 74.0)],
        'hgw': [result('hgw', 0, 60.0),
                result('hgw', 1, 66.0)],
        'uniform': [result('uniform', 1, 69.0),
                    result('uniform', 0, 63.0)],
    }
    params = dict(stock=29.06e6, hgw=8.25e6, uniform=8.25e6)
    table = study.task_section('seg', list(results), results, params)
    rows = {
        line.split('|')[1].strip(): line.split('|')[2:-1]
        for line in table.splitlines()[2:]
    }
    assert rows['stock'][1].strip() == '29.06M'
    assert rows['hgw'][3].strip() == '63.00 ± 4.24'  # mIoU mean ± std
    # Paired by seed: 63 - 60 and 69 - 66.
    # Results without the threshold-free scores show them as n/a.
    assert rows['hgw'][5].strip() == rows['hgw'][6].strip() == 'n/a'
    assert rows['uniform'][7].strip() == '3.00 ± 0.00'
    assert rows['stock'][7].strip() == '9.00 ± 1.41'
    assert rows['hgw'][7].strip() == ''
    assert rows['uniform'][8].strip() == '63.00, 69.00'  # by seed
    # Paired 95% intervals: to HGW (+3, +3: no spread) and to stock.
    assert rows['uniform'][9].strip() == '+3.00 [+3.00, +3.00]'
    assert rows['hgw'][9].strip() == ''
    low, high = confidence_interval([-10.0, -8.0])
    assert rows['hgw'][10].strip() == f'-9.00 [{low:+.2f}, {high:+.2f}]'
    # t(0.975, 1 dof) = 12.706: the interval of two values is wide.
    assert high == pytest.approx(-9 + 12.706 * 2**0.5 / 2**0.5, abs=1e-3)
    path = tmp_path / 'chart.png'
    study.bar_chart(['seg'], list(results), {'seg': results}, str(path))
    assert path.stat().st_size > 1000


def test_report_names_the_machines_the_runs_trained_on(study):
    results = {
        'seg': {
            'stock': [dict(machine='Xeon'), dict()],
            'hgw': [dict(machine='Xeon'),
                    dict(machine='EPYC')]
        }
    }
    assert study.machines_of(results) == (
        'EPYC (1 run); Xeon (2 runs); a machine not recorded (1 run)')


def test_variants_resolve_in_each_family(study):

    class Args:
        family = 'crop128'

    assert study.config_of(Args, 'seg',
                           'narrow').endswith('unet-s5-d16-c34_fcn_crop128.py')
    assert study.config_of(Args, 'seg', 'uniform') == \
        study.config_of(Args, 'seg', 'hgw')
    assert 'model.backbone.hgw_cfg.routing=uniform' in \
        study.VARIANTS['uniform'][2]
    with pytest.raises(SystemExit, match="no 'det' task"):
        study.config_of(Args, 'det', 'hgw')
    Args.family = 'demo'
    with pytest.raises(SystemExit, match="no 'narrow' model"):
        study.config_of(Args, 'det', 'narrow')


def test_crop_families_train_on_native_crops_and_test_whole_images(study):
    """The native-resolution families differ from the demo ones in their
    data pipeline alone: random 128x128 crops without a resize in
    training, whole images at their own size in testing; their HGWCaps
    configs change only the backbone (and the capsule hooks)."""
    from mmengine.config import Config

    def load(family, role):
        return Config.fromfile(
            osp.join(ROOT, study.FAMILIES[family]['seg'][1][role]))

    for family in ('crop128', 'deeplabv3plus-crop128'):
        stock, hgw = load(family, 'stock'), load(family, 'hgw')
        train = [t['type'] for t in stock.train_dataloader.dataset.pipeline]
        test = [t['type'] for t in stock.test_dataloader.dataset.pipeline]
        assert 'RandomCrop' in train and 'Resize' not in test, family
        assert not any('Resize' in t for t in train), family
        crop = stock.train_dataloader.dataset.pipeline[train.index(
            'RandomCrop')]
        assert tuple(crop['crop_size']) == (128, 128)
        # Training pads to the crops' own size (None: to the divisor).
        pad = stock.model.data_preprocessor.get('size')
        assert pad is None or tuple(pad) == tuple(crop['crop_size']), family
        assert hgw.train_dataloader == stock.train_dataloader
        assert hgw.test_dataloader == stock.test_dataloader
        assert hgw.model.backbone.type.startswith('HGWCaps')
        hgw.model.pop('backbone'), stock.model.pop('backbone')
        assert hgw.model == stock.model, family
    demo = load('deeplabv3plus', 'stock')
    assert load('deeplabv3plus-crop128', 'stock').model.decode_head == \
        demo.model.decode_head


def test_schedule_follows_iters(study):
    from mmengine.config import Config
    cfg = Config.fromfile(
        osp.join(ROOT, 'configs/study/unet-hgwcaps-s5-d16_fcn_crop128.py'))
    opts = study.schedule_options(cfg, 200)
    assert 'train_cfg.max_iters=200' in opts
    assert 'param_scheduler.0.end=200' in opts
    index = [h['type'] for h in cfg.custom_hooks].index('HGWBetaWarmupHook')
    assert f'custom_hooks.{index}.warmup_iters=50' in opts


def test_base_channels_narrow_the_stock_model_to_hgw_parameters(study):
    """At a given width every variant but the narrowed stock model has
    that width; the narrowed one the width whose parameter count is nearest
    HGWCaps' (the shipped base-34 narrowing at base 64)."""

    class Args:
        family = 'crop128'
        base_channels = 16
        cfg_options = ['model.decode_head.channels=12']

    narrow = study.model_options(Args, 'seg', 'narrow')
    base = int(narrow[0].split('=')[1])
    assert narrow[0] == f'model.backbone.base_channels={base}'
    assert f'model.auxiliary_head.in_channels={2 * base}' in narrow
    assert narrow[-1] == 'model.decode_head.channels=12'  # the user's last
    uniform = study.model_options(Args, 'seg', 'uniform')
    assert uniform[:2] == study.unet_width(16)[:2]
    assert 'model.backbone.hgw_cfg.routing=uniform' in uniform

    def params(variant, options):
        return study.count_parameters(study.config_of(Args, 'seg', variant),
                                      options)

    target = params('hgw', study.model_options(Args, 'seg', 'hgw'))
    gaps = {
        b: abs(
            params('narrow',
                   study.unet_width(b) + Args.cfg_options) - target)
        for b in (base - 1, base, base + 1)
    }
    assert min(gaps, key=gaps.get) == base
    Args.base_channels, Args.cfg_options = 64, None
    assert study.matched_width(Args, 'seg') == 34


def test_deeplabv3plus_family_narrows_its_stock_model_to_hgw_parameters(study):
    """The paper's placement (capsules in the dilated ResNet's stages 3-4)
    with its own controls: the narrowed stock DeepLabV3+ is the stock
    config at the width whose count is nearest the HGWCaps model's, heads
    scaled with the backbone; capsule variants change the layer alone."""

    class Args:
        family = 'deeplabv3plus'
        base_channels = 16
        cfg_options = None

    assert study.config_of(Args, 'seg', 'narrow') == \
        study.config_of(Args, 'seg', 'stock')
    assert study.config_of(Args, 'seg', 'uniform') == \
        study.config_of(Args, 'seg', 'hgw')
    assert study.model_options(Args, 'seg', 'uniform') == \
        study.resnet_v1c_width(16) + [
            'model.backbone.hgw_cfg.routing=uniform']

    def params(variant, base):
        return study.count_parameters(study.config_of(Args, 'seg', variant),
                                      study.resnet_v1c_width(base))

    target = params('hgw', 16)
    narrow = study.model_options(Args, 'seg', 'narrow')
    base = int(narrow[1].split('=')[1])
    assert narrow == study.resnet_v1c_width(base)
    assert 1 <= base < 16
    gaps = {
        b: abs(params('stock', b) - target)
        for b in (base - 1, base, base + 1)
    }
    assert min(gaps, key=gaps.get) == base
    # The stock config does not write its width: the backbone's default.
    Args.base_channels = None
    assert study.model_options(Args, 'seg', 'stock') == []
    assert study.model_options(Args, 'seg', 'narrow') == \
        study.resnet_v1c_width(study.matched_width(Args, 'seg'))


@pytest.mark.parametrize('argv, message', [
    (['--base-channels', '0'], '--base-channels must be >= 1'),
    (['--tasks', 'det', '--base-channels', '8'], "not to the tasks ['det']"),
    (['--family', 'deeplabv3plus', '--variants', 'hgw', 'dec_only'
      ], "variant 'dec_only' exists for the models ['unet']"),
    (['--family', 'crop128', '--tasks', 'det'], "no 'det' task"),
    (['--seeds', '0', '1', '0'], '--seeds names 0 twice'),
    (['--variants', 'hgw', 'uniform', 'hgw'], "--variants names 'hgw' twice"),
])
def test_base_channels_is_checked(study, monkeypatch, capsys, argv, message):
    monkeypatch.setattr(sys, 'argv', ['ablation_study.py', *argv])
    with pytest.raises(SystemExit):
        study.parse_args()
    assert message in capsys.readouterr().err


def test_placement_variant_moves_the_unet_capsules_and_is_seg_only(
        study, monkeypatch, capsys):
    from mmengine.config import Config

    from mmhgw.models.backbones.hgwcaps_unet import HGWCapsUNet

    class Args:
        family = 'crop128'

    cfg = Config.fromfile(osp.join(ROOT, study.config_of(Args, 'seg', 'hgw')))
    merge_options(cfg, study.variant_options('dec_only', 'unet'))
    kwargs = {k: v for k, v in cfg.model.backbone.items() if k != 'type'}
    kwargs.update(base_channels=4, init_cfg=None)
    assert HGWCapsUNet(**kwargs).hgw_layers == ['decoder.3.conv_block']
    monkeypatch.setattr(sys, 'argv', [
        'ablation_study.py', '--tasks', 'det', '--variants', 'hgw', 'dec_only'
    ])
    with pytest.raises(SystemExit):
        study.parse_args()
    err = capsys.readouterr().err
    assert "variant 'dec_only' exists for the models ['unet']" in err


def test_narrowed_control_of_a_placement_matches_its_parameter_count(study):
    """``narrow_dec_only`` is the stock UNet at the width nearest the
    decoder-only capsule UNet's count, at a given width and at the
    family's own (where ``narrow`` keeps its config file's fixed width)."""

    class Args:
        family = 'crop128'
        base_channels = 16
        cfg_options = None

    def params(variant):
        return study.count_parameters(
            study.config_of(Args, 'seg', variant),
            study.model_options(Args, 'seg', variant))

    options = study.model_options(Args, 'seg', 'narrow_dec_only')
    base = int(options[0].split('=')[1])
    assert study.config_of(Args, 'seg', 'narrow_dec_only') == \
        study.config_of(Args, 'seg', 'stock')
    # Wider than the shipped placement's control: dec_only has more weights.
    assert base > study.matched_width(Args, 'seg', 'narrow')
    target = params('dec_only')
    gaps = {}
    for b in (base - 1, base, base + 1):
        Args.base_channels = b
        gaps[b] = abs(params('stock') - target)
    assert min(gaps, key=gaps.get) == base
    Args.base_channels = None
    assert study.model_options(Args, 'seg', 'narrow') == []
    full = study.model_options(Args, 'seg', 'narrow_dec_only')
    assert full == study.unet_width(
        study.matched_width(Args, 'seg', 'narrow_dec_only'))
    assert abs(params('narrow_dec_only') / params('dec_only') - 1) < 0.05


@pytest.mark.parametrize('section', ['study', 'membrane'])
def test_out_page_with_broken_markers_is_refused_before_any_run(
        study, monkeypatch, capsys, tmp_path, section):
    out = tmp_path / 'evidence.md'
    out.write_text(f'# Evidence\n<!-- {section}:begin -->\nno end line\n')
    monkeypatch.setattr(
        sys, 'argv',
        ['ablation_study.py', '--out',
         str(out), '--section', section])
    with pytest.raises(SystemExit):
        study.parse_args()
    assert f'--out {out}:' in capsys.readouterr().err


def test_a_section_key_that_cannot_name_a_marker_is_refused(
        study, monkeypatch, capsys):
    monkeypatch.setattr(sys, 'argv',
                        ['ablation_study.py', '--section', 'a -->'])
    with pytest.raises(SystemExit):
        study.parse_args()
    assert "--section must be" in capsys.readouterr().err


def test_results_of_other_settings_are_not_mixed_in(tmp_path):
    """A finished run made with other settings is refused, not reused."""
    data = tmp_path / 'data' / 'ISIC2018'
    make_isic_lesions(str(data), num_train=2, num_val=1, size=(64, 64))
    (data / '.complete').write_text(DATA_VERSION)
    work = tmp_path / 'work' / 'seg' / 'stock' / 'seed0'
    work.mkdir(parents=True)
    (work / 'result.json').write_text(
        json.dumps(
            dict(task='seg', variant='stock', seed=0, iters=60,
                 config='configs/demo/unet-s5-d16_fcn_demo-isic.py',
                 options=[], requested_iters=None,
                 metrics=dict(mIoU=50.0, mDice=60.0), time_per_iter=1.0)))
    done = subprocess.run([
        sys.executable, 'tools/analysis/ablation_study.py', '--variants',
        'stock', '--seeds', '0', '--data',
        str(tmp_path / 'data'), '--work-dir',
        str(tmp_path / 'work'), '--out',
        str(tmp_path / 'x.md'), '--image',
        str(tmp_path / 'x.png'), '--iters', '3'
    ], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode != 0
    assert 'made with other settings' in done.stderr
    assert not (tmp_path / 'x.md').exists()


@pytest.mark.parametrize(
    'variant, expected',
    [
        ('uniform', ['routing']),
        ('ablA', ['solver_cfg']),
        ('ablB', ['reg_weight']),
        ('ablC', ['use_observed']),
        ('beta1', ['beta_final']),
        ('counts', ['observed']),
        ('reg_layer', ['reg_scope']),
        ('temp05', ['temperature']),
        ('eps01', ['solver_cfg']),
        ('steps3', ['solver_cfg']),
        ('unroll', ['solver_cfg']),
        ('planpose', ['pose_from']),
        ('pluspose', ['pose_from']),
        ('comppose', ['pose_from']),
        ('parts03', ['subcapsules']),
        ('planpose_unroll', ['pose_from', 'solver_cfg']),
        ('planpose_soft_unroll', ['pose_from', 'solver_cfg']),
        ('planpose_gain025', ['pose_from', 'pose_weight']),
        # Another embedding draws other numbers before the subcapsules'.
        ('positions',
         ['pose_from', 'components', 'subcapsules', 'pose_weight']),
        ('positions_uniform',
         ['routing', 'pose_from', 'components', 'subcapsules', 'pose_weight']),
        ('positions_norm', [
            'pose_from', 'components', 'component_norm', 'subcapsules',
            'pose_weight'
        ]),
        ('positions_norm_uniform', [
            'routing', 'pose_from', 'components', 'component_norm',
            'subcapsules', 'pose_weight'
        ]),
        ('positions_norm_plan', [
            'pose_from', 'components', 'component_norm', 'subcapsules',
            'pose_weight'
        ]),
        ('norm', ['component_norm']),
        ('uniform_norm', ['routing', 'component_norm'])
    ])
def test_capsule_variants_name_real_layer_arguments(study, variant, expected):
    # Each capsule variant's options, merged into the family's HGWCaps
    # config, build a layer that differs from the shipped one as described.
    import warnings

    from mmengine.config import Config

    from mmhgw.models import HGWCaps

    class Args:
        family = 'crop128'

    cfg = Config.fromfile(osp.join(ROOT, study.config_of(Args, 'seg',
                                                         variant)))
    torch.manual_seed(0)
    shipped = HGWCaps(
        64, 64, 3,
        **{k: v
           for k, v in cfg.model.backbone.hgw_cfg.items() if k != 'type'})
    merge_options(cfg, study.VARIANTS[variant][2])
    with warnings.catch_warnings():
        warnings.simplefilter('error', DeprecationWarning)
        torch.manual_seed(0)
        layer = HGWCaps(
            64, 64, 3, **{
                k: v
                for k, v in cfg.model.backbone.hgw_cfg.items() if k != 'type'
            })
    differs = [
        name for name in ('routing', 'reg_weight', 'use_observed', 'observed',
                          'reg_scope', 'temperature', 'pose_from',
                          'beta_final', 'components', 'component_norm')
        if getattr(layer, name) != getattr(shipped, name)
    ]
    differs += ['solver_cfg'] if layer.solver_cfg != shipped.solver_cfg \
        else []
    differs += [] if torch.equal(layer.subcapsules, shipped.subcapsules) \
        else ['subcapsules']
    differs += [] if torch.equal(layer.pose_weight, shipped.pose_weight) \
        else ['pose_weight']
    assert differs == expected


def test_subcapsule_rate_variant_scales_their_learning_rate_alone(study):
    from mmengine.config import Config
    from mmengine.optim import build_optim_wrapper

    from mmhgw.models import HGWCaps

    class Args:
        family = 'crop128'

    cfg = Config.fromfile(
        osp.join(ROOT, study.config_of(Args, 'seg', 'sub_lr100')))
    merge_options(cfg, study.VARIANTS['sub_lr100'][2])
    layer = HGWCaps(16, 8, 3, padding=1, in_types=4, out_types=4, num_parts=3,
                    part_dim=4)
    wrapper = build_optim_wrapper(layer, cfg.optim_wrapper)
    base = cfg.optim_wrapper.optimizer.lr
    rates = {
        id(p): group['lr']
        for group in wrapper.optimizer.param_groups
        for p in group['params']
    }
    assert rates[id(layer.subcapsules)] == pytest.approx(100 * base)
    assert rates[id(layer.pose_weight)] == pytest.approx(base)
    assert rates[id(layer.embed.weight)] == pytest.approx(base)


def test_test_config_is_the_run_config(study, tmp_path):
    """The written test config holds the variant's and the data's options:
    a uniform-routing checkpoint tested with it routes uniformly."""
    from mmengine.config import Config
    options = (study.data_options('seg', str(tmp_path / 'data')) +
               study.VARIANTS['uniform'][2])
    path = study.test_config(
        study.merged_config(
            'configs/demo/unet-hgwcaps-s5-d16_fcn_demo-isic.py', options),
        study.TASKS['seg'], str(tmp_path))
    cfg = Config.fromfile(path)
    assert cfg.model.backbone.hgw_cfg.routing == 'uniform'
    assert cfg.test_dataloader.dataset.data_root == str(tmp_path / 'data')
    assert [e['type'] for e in cfg.test_evaluator
            ] == ['IoUMetric', 'SeparabilityMetric']
