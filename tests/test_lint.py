"""The style gate: flake8, isort and yapf (settings in setup.cfg) over the
Python sources, clang-format (.clang-format) over the C++ sources, as
.pre-commit-config.yaml runs them. A failure prints what to change."""
import glob
import importlib.util
import os.path as osp
import shutil
import subprocess
import sys

import pytest

ROOT = osp.dirname(osp.dirname(osp.abspath(__file__)))
PYTHON_DIRS = ['mmhgw', 'tools', 'bench', 'tests', 'configs']
CPP_SOURCES = sorted(
    glob.glob(osp.join(ROOT, 'mmhgw', 'ops', 'csrc', '*.cpp')) +
    glob.glob(osp.join(ROOT, 'mmhgw', 'ops', 'csrc', '*.h')))

#: linter -> its command line (after ``python -m``) checking PYTHON_DIRS.
PYTHON_LINTERS = {
    'flake8': ['flake8', *PYTHON_DIRS],
    'isort': ['isort', '--check-only', '--diff', *PYTHON_DIRS],
    'yapf': ['yapf', '--diff', '--recursive', '--parallel', *PYTHON_DIRS],
}


def report(linter: str, done: subprocess.CompletedProcess) -> str:
    """The linter's findings (its diff, for the formatters), to act on."""
    return (f'{linter} exited {done.returncode}; run it (the formatters '
            f'without --check-only / --diff, in place) or fix these:\n'
            f'{done.stdout[-20000:]}{done.stderr[-5000:]}')


@pytest.mark.parametrize('linter', sorted(PYTHON_LINTERS))
def test_python_style(linter):
    if importlib.util.find_spec(linter) is None:
        pytest.skip(f'{linter} is not installed (requirements/tests.txt)')
    done = subprocess.run([sys.executable, '-m', *PYTHON_LINTERS[linter]],
                          cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, report(linter, done)


def test_cpp_style():
    clang_format = shutil.which('clang-format') or shutil.which(
        'clang-format', path=osp.dirname(sys.executable))
    if clang_format is None:
        pytest.skip('clang-format is not installed (requirements/tests.txt)')
    assert CPP_SOURCES
    done = subprocess.run(
        [clang_format, '--dry-run', '--Werror', *CPP_SOURCES], cwd=ROOT,
        capture_output=True, text=True)
    assert done.returncode == 0, report('clang-format', done)
