"""tools/analysis/ablation_study.py: end to end on a tiny setting (one
variant, two seeds, two iterations each, through the train and test
tools), and its report on given results."""
import importlib.util
import json
import os.path as osp
import subprocess
import sys

import pytest

from mmhgw.datasets.synthetic import DATA_VERSION, make_isic_lesions

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))


@pytest.fixture(scope='module')
def study():
    spec = importlib.util.spec_from_file_location(
        'ablation_study', osp.join(ROOT, 'tools/analysis/ablation_study.py'))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_study(tmp_path, *extra):
    cmd = [sys.executable, 'tools/analysis/ablation_study.py',
           '--variants', 'stock', '--seeds', '0', '1',
           '--data', str(tmp_path / 'data'),
           '--work-dir', str(tmp_path / 'work'),
           '--out', str(tmp_path / 'docs' / 'ablations.md'),
           '--image', str(tmp_path / 'docs' / 'images' / 'ablations.png'),
           '--cfg-options', 'train_cfg.max_iters=2',
           'train_dataloader.batch_size=1', *extra]
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
        assert result['time_per_iter'] > 0
        values.append(result['metrics']['mIoU'])
        # The seed reached the Runner of both tools.
        for tool in ('train', 'test'):
            assert f'seed: {seed}' in (path / f'{tool}.out').read_text()
    report = (tmp_path / 'docs' / 'ablations.md').read_text()
    row = [line for line in report.splitlines()
           if line.startswith('| stock')]
    assert len(row) == 1 and '±' in row[0]
    assert ', '.join(f'{v:.2f}' for v in values) in row[0]
    assert '](images/ablations.png)' in report
    assert '(2 runs, ' in report  # the runs' own wall time
    image = tmp_path / 'docs' / 'images' / 'ablations.png'
    assert image.stat().st_size > 1000
    # A second call reuses the finished runs and keeps the notes written
    # under the marker.
    notes = '<!-- notes -->\n## Reading\nA null result.\n'
    with open(tmp_path / 'docs' / 'ablations.md', 'a') as f:
        f.write('\n' + notes)
    assert 'training 2 iterations' not in run_study(tmp_path)
    report = (tmp_path / 'docs' / 'ablations.md').read_text()
    assert report.endswith(notes)
    assert sum(line.startswith('| stock')
               for line in report.splitlines()) == 1


def test_report_pairs_seeds_against_hgw(study, tmp_path):
    def result(variant, seed, miou):
        return dict(variant=variant, seed=seed, iters=120,
                    metrics=dict(mIoU=miou, mDice=miou + 5),
                    time_per_iter=2.0)

    results = {
        'stock': [result('stock', 0, 70.0), result('stock', 1, 74.0)],
        'hgw': [result('hgw', 0, 60.0), result('hgw', 1, 66.0)],
        'uniform': [result('uniform', 1, 69.0), result('uniform', 0, 63.0)],
    }
    params = dict(stock=29.06e6, hgw=8.25e6, uniform=8.25e6)
    table = study.task_section('seg', list(results), results, params)
    rows = {line.split('|')[1].strip(): line.split('|')[2:-1]
            for line in table.splitlines()[2:]}
    assert rows['stock'][1].strip() == '29.06M'
    assert rows['hgw'][3].strip() == '63.00 ± 4.24'  # mIoU mean ± std
    # Paired by seed: 63 - 60 and 69 - 66.
    assert rows['uniform'][5].strip() == '3.00 ± 0.00'
    assert rows['stock'][5].strip() == '9.00 ± 1.41'
    assert rows['hgw'][5].strip() == ''
    assert rows['uniform'][6].strip() == '63.00, 69.00'  # by seed
    path = tmp_path / 'chart.png'
    study.bar_chart(['seg'], list(results), {'seg': results}, str(path))
    assert path.stat().st_size > 1000
