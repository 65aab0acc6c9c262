"""tools/gpu_suite.py: its dry run end to end (a few stages, on the CPU),
its stage bookkeeping and result parsers; bench/write_gpu_benchmarks.py on
the dry run's JSON."""
import importlib.util
import io
import json
import math
import os
import os.path as osp
import re
import shutil
import subprocess
import sys
import tarfile

import pytest

from mmhgw.datasets.synthetic import make_isic_lesions

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
DRY_STAGES = 'environment,bench-op,train-unet,study'


def load(name, path):
    spec = importlib.util.spec_from_file_location(name, osp.join(ROOT, path))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope='module')
def suite():
    return load('gpu_suite', 'tools/gpu_suite.py')


@pytest.fixture(scope='module')
def writer():
    # The writer imports the scripts beside it, as when run as a script
    # (its folder first on the import path).
    with pytest.MonkeyPatch.context() as patch:
        patch.syspath_prepend(osp.join(ROOT, 'bench'))
        yield load('write_gpu_benchmarks', 'bench/write_gpu_benchmarks.py')


@pytest.fixture(scope='module')
def dry_run(tmp_path_factory):
    out = tmp_path_factory.mktemp('gpu-suite')
    data = out / 'lesions'
    make_isic_lesions(str(data), num_train=2, num_val=1, size=(64, 64))
    done = subprocess.run([
        sys.executable, 'tools/gpu_suite.py',
        str(out / 'out'), '--dry-run', '--stages', DRY_STAGES, '--budget',
        '1200', '--archive',
        str(out / 'out.tgz'), '--study-jobs', '2', '--study-args',
        f'--data-root {data} --variants stock --seeds 0 1 --iters 50 '
        '--cfg-options train_dataloader.batch_size=1'
    ], cwd=ROOT, capture_output=True, text=True)
    with open(out / 'out' / 'gpu_suite.json') as f:
        report = json.load(f)
    return out, done, report


def test_dry_run_records_every_stage(dry_run):
    out, done, report = dry_run
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    stages = report['stages']
    assert report['dry_run'] and report['schema'] == 1
    assert report['environment']['device'] == 'cpu'
    assert report['environment']['torch']
    # What a CPU cannot do is skipped with its reason, the rest not chosen.
    for name in ('install', 'mmcv-build', 'mmhgw-ext', 'bench-mask-rcnn',
                 'tests'):
        assert stages[name]['status'] == 'skipped'
        assert stages[name]['reason'].startswith('dry run'), name
    for name in ('test-cuda', 'bench-layer', 'train-deeplabv3plus',
                 'train-mask-rcnn'):
        assert stages[name] == dict(status='skipped', reason='not selected')
    # data comes with train-unet, which needs it.
    for name in ('environment', 'data', 'bench-op', 'train-unet', 'study'):
        assert stages[name]['status'] == 'ok', stages[name]
    assert (out / 'out.tgz').stat().st_size > 0


def test_dry_run_stages_ran_against_the_standin_ops(dry_run):
    _, _, report = dry_run
    for name in ('data', 'bench-op', 'train-unet'):
        assert {c['mmcv_ops'] for c in report['stages'][name]['commands']} \
            == {'stand-in'}, name


def test_dry_run_results(dry_run):
    out, _, report = dry_run
    rows = report['stages']['bench-op']['result']['rows']
    assert [r[1:3] for r in rows] == [['cpp', 'poses'], ['cpp', 'distance'],
                                      ['torch', 'poses'],
                                      ['torch', 'distance']]
    assert all(t > 0 for r in rows for t in r[3] + r[5])
    train = report['stages']['train-unet']['result']
    assert train['iters'] == 2 and not train['amp']
    for label in ('stock', 'hgwcaps'):
        run = train['runs'][label]
        assert run['returncode'] == 0 and run['iters'] == 2
        assert run['losses_finite'] and math.isfinite(run['loss_last'])
        assert run['iter_time_s'] > 0
        assert (out / 'out' / run['log']).exists()
        assert (out / 'out' / run['scalars']).exists()
    assert train['time_ratio'] > 0


def test_dry_run_study_brings_back_its_runs(dry_run, tmp_path):
    out, _, report = dry_run
    # The dry run shortens the study to seed 0 and 2 iterations.
    study = report['stages']['study']
    assert study['result'] == dict(finished=['seg/stock/seed0'], report=True)
    assert '--jobs 2' in study['commands'][0]['command']
    with tarfile.open(out / 'out.tgz') as tf:
        names = tf.getnames()
        assert 'out/logs/study.md' in names
        tf.extract('out/logs/study-runs.tar.gz', tmp_path, filter='data')
    with tarfile.open(tmp_path / 'out/logs/study-runs.tar.gz') as tf:
        runs = tf.getnames()
    assert 'seg/stock/seed0/result.json' in runs
    assert 'seg/stock/seed0/train.out' in runs
    assert not [n for n in runs if n.endswith('.pth')]  # no checkpoint
    study_md = (out / 'out' / 'logs' / 'study.md').read_text()
    assert '| stock |' in study_md and 'iterations' in study_md


def test_study_logs_come_back_for_runs_that_did_not_finish(suite, tmp_path):
    s = make_suite(suite, tmp_path)
    runs = tmp_path / 'runs'
    done, cut = runs / 'seg' / 'hgw' / 'seed0', runs / 'seg' / 'hgw' / 'seed1'
    for run in (done, cut):
        run.mkdir(parents=True)
        (run / 'train.out').write_text('training\n')
        (run / 'iter_2.pth').write_bytes(b'0' * 100)
    (done / 'result.json').write_text('{}')
    (cut / 'test.out').write_text('Traceback: TypeError\n')
    os.makedirs(s.logs)
    assert s.pack_study(str(runs)) == ['seg/hgw/seed0']
    with tarfile.open(osp.join(s.logs, 'study-runs.tar.gz')) as tf:
        assert sorted(tf.getnames()) == [
            'seg/hgw/seed0/result.json', 'seg/hgw/seed0/train.out',
            'seg/hgw/seed1/test.out', 'seg/hgw/seed1/train.out'
        ]


def test_study_runs_of_an_earlier_machine_are_unpacked_for_reuse(
        suite, tmp_path):
    s = make_suite(suite, tmp_path)
    earlier = tmp_path / 'earlier'
    (earlier / 'seg' / 'stock' / 'seed0').mkdir(parents=True)
    (earlier / 'seg' / 'stock' / 'seed0' / 'result.json').write_text('{}')
    (earlier / 'seg' / 'stock' / 'seed0' / 'train.out').write_text('done')
    os.makedirs(s.logs)
    s.pack_study(str(earlier))
    archive = osp.join(s.logs, 'study-runs.tar.gz')
    runs = tmp_path / 'machine' / 'runs'
    suite.unpack_study_runs(archive, str(runs))
    assert (runs / 'seg' / 'stock' / 'seed0' / 'result.json').read_text() \
        == '{}'
    # What would land outside the study's folder is refused.
    evil = tmp_path / 'evil.tar.gz'
    with tarfile.open(evil, 'w:gz') as tf:
        info = tarfile.TarInfo('../outside.json')
        tf.addfile(info, io.BytesIO(b''))
    with pytest.raises(tarfile.TarError):
        suite.unpack_study_runs(str(evil), str(runs))
    assert not (tmp_path / 'machine' / 'outside.json').exists()
    with pytest.raises(SystemExit):
        make_suite(suite, tmp_path, '--study-args', '--seeds 0',
                   '--study-runs', str(tmp_path / 'no.tgz'))


def test_study_stage_needs_its_args_and_keeps_its_own_paths(suite, tmp_path):
    s = make_suite(suite, tmp_path, '--stages', 'study')
    assert not s.stage('study', s.study)
    assert s.report['stages']['study'] == dict(status='skipped',
                                               reason='no --study-args')
    for option in ('--out', '--work-dir=x'):
        with pytest.raises(SystemExit):
            make_suite(suite, tmp_path, '--study-args', f'{option} y')


@pytest.mark.parametrize('argv, message', [
    (['--study-args', '--seeds "0'], '--study-args .*No closing quotation'),
    (['--study-runs', __file__], '--study-runs needs --study-args'),
])
def test_study_options_are_checked(suite, tmp_path, capsys, argv, message):
    with pytest.raises(SystemExit) as done:
        make_suite(suite, tmp_path, *argv)
    assert done.value.code == 2
    assert re.search(message, capsys.readouterr().err)


def sections(text):
    return dict(
        re.findall(r'<!-- (\S+):begin -->(.*?)<!-- \1:end -->', text, re.S))


def test_writer_replaces_only_the_gpu_sections(dry_run, writer, tmp_path):
    out, _, _ = dry_run
    doc = tmp_path / 'benchmarks.md'
    shutil.copyfile(osp.join(ROOT, 'docs', 'benchmarks.md'), doc)
    before = sections(doc.read_text())
    writer.main([
        str(out / 'out' / 'gpu_suite.json'), '--doc',
        str(doc), '--allow-dry-run'
    ])
    text = doc.read_text()
    after = sections(text)
    written = {'routing-op-cuda', 'training-amp-cuda', 'gpu-suite-cuda'}
    assert written <= set(after)
    for key, body in before.items():
        if key not in written:
            assert after[key] == body, key
    assert set(after) == set(before) | written
    # Hand-written text outside the sections stays.
    assert '## Notes (written by hand from the runs above)' in text
    op = after['routing-op-cuda']
    assert 'Command: `python bench/bench_op.py --device cpu --feature-map ' \
        '3x4 --repeats 1` (run by `python tools/gpu_suite.py' in op
    assert 'dry run on a CPU' in op and '| 1x3x4 | cpp | poses |' in op
    assert '| 1x3x4 | cpp | distance |' in op
    training = after['training-amp-cuda']
    assert training.count('UNet s5-d16') == 2 and '| HGWCaps | 2 of 2 |' \
        in training
    suite = after['gpu-suite-cuda']
    assert '| train-unet | ok |' in suite and '| tests | skipped |' in suite


def test_writer_refuses_a_dry_run_by_default(dry_run, writer, tmp_path):
    out, _, _ = dry_run
    with pytest.raises(SystemExit) as exit_info:
        writer.main([
            str(out / 'out' / 'gpu_suite.json'), '--doc',
            str(tmp_path / 'doc.md')
        ])
    assert exit_info.value.code == 2
    assert not (tmp_path / 'doc.md').exists()


def test_writer_rejects_other_json(writer, tmp_path, capsys):
    path = tmp_path / 'other.json'
    path.write_text('{"rows": []}')
    with pytest.raises(SystemExit):
        writer.main([str(path), '--doc', str(tmp_path / 'doc.md')])
    assert 'not a tools/gpu_suite.py report' in capsys.readouterr().err


def test_short_command_drops_the_plumbing(writer):
    command = (f'/opt/venv/bin/python {ROOT}/bench/bench_op.py --device cuda '
               f'--no-write --json /tmp/x/bench-op.json --batches 1,2')
    assert writer.short_command(command) == \
        'python bench/bench_op.py --device cuda --batches 1,2'


# -- the bookkeeping, without subprocesses --------------------------------


def make_suite(suite, tmp_path, *extra):
    return suite.Suite(
        suite.parse_args([str(tmp_path / 'out'), '--dry-run', *extra]))


def test_a_failing_stage_is_recorded_and_the_next_runs(suite, tmp_path):
    s = make_suite(suite, tmp_path)

    def broken(limit):
        raise ValueError('boom')

    def stopped(limit):
        raise suite.Stop('failed', 'exit 3')

    assert not s.stage('data', broken)
    assert not s.stage('bench-op', stopped)
    assert s.stage('bench-layer', lambda limit: dict(limit=limit))
    report = json.loads((tmp_path / 'out' / 'gpu_suite.json').read_text())
    data = report['stages']['data']
    assert data['status'] == 'error' and 'ValueError: boom' in data['reason']
    assert report['stages']['bench-op']['status'] == 'failed'
    assert report['stages']['bench-op']['reason'] == 'exit 3'
    layer = report['stages']['bench-layer']
    assert layer['status'] == 'ok'
    assert layer['result']['limit'] <= suite.STAGES['bench-layer'][0]


def test_a_stage_without_budget_left_is_skipped(suite, tmp_path):
    s = make_suite(suite, tmp_path, '--budget', '30')
    ran = []
    assert not s.stage('data', ran.append)
    assert not ran
    reason = s.report['stages']['data']['reason']
    assert reason.startswith('not started:') and 'of the 30.0 s budget' \
        in reason


def test_a_command_past_its_limit_is_ended(suite, tmp_path):
    s = make_suite(suite, tmp_path)
    with pytest.raises(suite.Stop) as stop:
        s.checked('data',
                  [sys.executable, '-c', 'import time; '
                   'time.sleep(60)'], 1)
    assert stop.value.status == 'timeout'
    run = s.report['stages']['data']['commands'][0]
    assert run['timed_out'] and run['seconds'] < 30


def test_stage_selection_adds_what_a_stage_needs(suite, tmp_path):
    s = make_suite(suite, tmp_path, '--stages', 'train-mask-rcnn')
    assert {'train-mask-rcnn', 'data', 'mmcv-build', 'environment'} \
        <= s.selected
    assert 'bench-op' not in s.selected
    with pytest.raises(SystemExit, match='unknown stage'):
        make_suite(suite, tmp_path, '--stages', 'bench-opp')


def test_junit_summary(suite, tmp_path):
    path = tmp_path / 'r.xml'
    path.write_text(
        '<testsuites><testsuite tests="4" failures="1" errors="1" '
        'skipped="1" time="2.5">'
        '<testcase classname="tests.a" name="ok"/>'
        '<testcase classname="tests.a" name="bad"><failure message="assert '
        '1 == 2&#10;more"/></testcase>'
        '<testcase classname="tests.b" name="err"><error message=""/>'
        '</testcase><testcase classname="tests.b" name="skip"><skipped/>'
        '</testcase></testsuite></testsuites>')
    summary = suite.junit_summary(str(path))
    assert (summary['tests'], summary['passed'], summary['failures'],
            summary['errors'], summary['skipped']) == (4, 1, 1, 1, 1)
    assert summary['failed'] == ['tests.a::bad: assert 1 == 2', 'tests.b::err']


def test_training_summary(suite, tmp_path):
    vis = tmp_path / '20260101_000000' / 'vis_data'
    vis.mkdir(parents=True)
    records = [
        dict(iter=10, loss=2.0, time=9.0, memory=100),
        dict(iter=20, loss=1.5, time=0.2, memory=120),
        dict(iter=30, loss=1.0, time=0.4, memory=110),
        dict(mIoU=55.0, time=0.1, step=30)
    ]
    (vis / 'scalars.json').write_text('\n'.join(
        json.dumps(r) for r in records))
    summary = suite.training_summary(str(tmp_path))
    assert summary['iters'] == 30 and summary['records'] == 3
    # The first interval holds the warm-up: left out of the median.
    assert summary['iter_time_s'] == pytest.approx(0.3)
    assert summary['memory_mib'] == 120 and summary['val'] == dict(mIoU=55.0)
    assert (summary['loss_first'], summary['loss_last']) == (2.0, 1.0)
    assert summary['losses_finite']
    records[1]['loss'] = float('nan')
    (vis / 'scalars.json').write_text('\n'.join(
        json.dumps(r) for r in records))
    assert not suite.training_summary(str(tmp_path))['losses_finite']
    assert suite.training_summary(str(tmp_path / 'none'))['scalars'] is None


def test_training_options_stretch_the_schedule(suite):
    seg = suite.training_options('seg', 300, dry_run=False)
    assert 'param_scheduler.0.end=300' in seg
    assert 'default_hooks.logger.interval=10' in seg
    assert 'val_cfg=None' not in seg
    det = suite.training_options('det', 100, dry_run=True)
    assert 'param_scheduler.1.milestones=[80]' in det and 'val_cfg=None' \
        in det


# -- the GPU-side set-up, on made-up packages ----------------------------


def fake_wheelhouse(root):
    """A wheelhouse of one small wheel and a pure-Python ``mmcv`` sdist that
    builds in seconds."""
    import io
    import tarfile
    import zipfile
    root.mkdir()
    with zipfile.ZipFile(root / 'tinydep-1.0-py3-none-any.whl', 'w') as zf:
        zf.writestr('tinydep/__init__.py', 'VALUE = 1\n')
        zf.writestr('tinydep-1.0.dist-info/METADATA',
                    'Metadata-Version: 2.1\nName: tinydep\nVersion: 1.0\n')
        zf.writestr(
            'tinydep-1.0.dist-info/WHEEL',
            'Wheel-Version: 1.0\nRoot-Is-Purelib: true\n'
            'Tag: py3-none-any\n')
        zf.writestr('tinydep-1.0.dist-info/RECORD', '')
    (root / 'src').mkdir()
    files = {
        'setup.py': "from setuptools import setup\n"
        "setup(name='mmcv', version='0.0.1', packages=['mmcv', "
        "'mmcv.ops'])\n", 'mmcv/__init__.py': "__version__ = '0.0.1'\n",
        'mmcv/ops/__init__.py': '', 'mmcv/ops/csrc/skipped.py': ''
    }
    with tarfile.open(root / 'src' / 'mmcv-0.0.1.tar.gz', 'w:gz') as tf:
        for name, text in files.items():
            info = tarfile.TarInfo(f'mmcv-0.0.1/{name}')
            info.size = len(text)
            tf.addfile(info, io.BytesIO(text.encode()))


def test_install_and_mmcv_build_once_per_machine(suite, tmp_path, monkeypatch):
    fake_wheelhouse(tmp_path / 'wh')
    monkeypatch.setattr(suite, 'INSTALL_IMPORTS', ('tinydep', ))
    monkeypatch.setattr(
        suite, 'MMCV_OPS_PROBE', 'import mmcv, tinydep; '
        'assert mmcv.__version__ == "0.0.1"')
    args = [
        str(tmp_path / 'out'), '--work',
        str(tmp_path / 'work'), '--wheelhouse',
        str(tmp_path / 'wh')
    ]
    s = suite.Suite(suite.parse_args(args))
    assert s.stage('install', s.install)
    assert s.report['stages']['install']['result']['reused'] is False
    assert (tmp_path / 'work' / 'site' / 'tinydep' / '__init__.py').exists()
    s.make_standin()
    standin = tmp_path / 'work' / 'standin' / 'mmcv'
    assert (standin / '_ext.py').exists() and (standin / 'ops').is_dir()
    assert not (standin / 'ops' / 'csrc').exists()
    work = tmp_path / 'work'
    assert s.env()['PYTHONPATH'].split(':')[:3] == [
        ROOT, str(work / 'standin'),
        str(work / 'site')
    ]
    s.report['environment']['capability'] = [9, 0]
    s.stage('mmcv-build', s.start_mmcv_build)
    stage = s.report['stages']['mmcv-build']
    assert stage['status'] == 'running'
    assert stage['result']['arch'] == '9.0'
    assert stage['result']['sources'] == 'unpacked'
    assert s.settle_mmcv(120)
    assert stage['status'] == 'ok', stage
    assert s.ops == 'built' and s.report['environment']['mmcv'] == '0.0.1'
    assert s.env()['PYTHONPATH'].split(':')[1] == str(tmp_path / 'work' /
                                                      'mmcv' / 'site')

    # A second run on the same machine reuses both.
    again = suite.Suite(suite.parse_args(args))
    assert again.stage('install', again.install)
    assert again.report['stages']['install']['result']['reused'] is True
    again.stage('mmcv-build', again.start_mmcv_build)
    assert again.report['stages']['mmcv-build']['status'] == 'ok'
    assert again.report['stages']['mmcv-build']['result']['reused'] == \
        'the installed build'
    assert again.ops == 'built'


def test_whole_suite_stage_in_the_background(suite, tmp_path):
    s = make_suite(suite, tmp_path)
    tests = tmp_path / 'test_tiny.py'
    tests.write_text('def test_one():\n    pass\n\n'
                     'def test_two():\n    assert 1 == 2\n')
    s.test_paths = [str(tests)]
    s.args.test_workers = 0
    s.record('tests', status='running', started_s=0)
    s.start_tests(60)
    s.settle_tests()
    stage = s.report['stages']['tests']
    assert stage['status'] == 'failed'
    result = stage['result']
    assert (result['tests'], result['passed'], result['failures']) == (2, 1, 1)
    assert result['failed'][0].endswith('test_two: assert 1 == 2')
