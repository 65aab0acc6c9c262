"""bench/tune_triton.py through the Triton interpreter: each variant's
kernels checked against the float64 op, the arguments it refuses."""
import json
import os
import os.path as osp
import subprocess
import sys

import pytest

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))


def run(*args, tmp_path):
    env = dict(os.environ, TRITON_INTERPRET='1')
    return subprocess.run([
        sys.executable, 'bench/tune_triton.py', '--device', 'cpu',
        '--no-write', *args
    ], cwd=ROOT, env=env, capture_output=True, text=True)


def test_each_variant_is_checked_against_float64(tmp_path):
    pytest.importorskip('triton')
    out = tmp_path / 'tune.json'
    # shipped, a smaller forward tile, a smaller backward tile, ieee
    # products in each kernel
    done = run('--feature-map', '1x1', '--rounds', '1', '--variants',
               '1,7,11,13', '--json', str(out), tmp_path=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = json.loads(out.read_text())['rows']
    assert [r['name'] for r in rows] == [
        'shipped (64x4/64x8, tf32x3/tf32x3)', 'forward tile 32x4',
        'backward tile 32x4', 'forward products ieee', 'backward products ieee'
    ]
    for row in rows:
        distance, gradient, best = row['errors']
        assert distance < 1e-5 and gradient < 1e-4 and best == 1.0, row
        assert len(row['forward']) == len(row['both']) == 1
    assert '| backward products ieee |' in done.stdout


@pytest.mark.parametrize('args,message', [
    (['--feature-map', '0x3'], '--feature-map must be HxW'),
    (['--variants', '1,99'], '--variants must be comma-separated indices'),
    (['--rounds', '0'], '--rounds must be >= 1'),
])
def test_bad_arguments_name_themselves(args, message, tmp_path):
    done = run(*args, tmp_path=tmp_path)
    assert done.returncode == 2 and message in done.stderr, done.stderr
