"""tools/setup_env.sh repairs what it used to report as ready: a venv
without pip, mmcv whose compiled ops do not import; it checks for a C++
compiler before the long build; and it does nothing when all is there.

pip never installs for real here: the fake venv's ``python`` runs this
interpreter but logs ``-m pip install`` calls instead, and the venv without pip
gets an index-less pip that cannot download."""
import os
import os.path as osp
import shutil
import subprocess
import sys
import textwrap

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
SETUP = osp.join(ROOT, 'tools', 'setup_env.sh')


def fake_venv(tmp_path, broken_ops=False):
    """A venv whose python is this one, with pip installs logged (and, with
    ``broken_ops``, an mmcv package whose ops fail to import, as after a
    torch change)."""
    venv, log = tmp_path / 'venv', tmp_path / 'pip.log'
    (venv / 'bin').mkdir(parents=True)
    extra = ''
    if broken_ops:
        shadow = tmp_path / 'shadow' / 'mmcv' / 'ops'
        shadow.mkdir(parents=True)
        (shadow.parent / '__init__.py').write_text('')
        (shadow / '__init__.py').write_text(
            "raise ImportError('_ext.so: undefined symbol')\n")
        extra = f'export PYTHONPATH={tmp_path / "shadow"}\n'
    python = venv / 'bin' / 'python'
    python.write_text(textwrap.dedent(f"""\
        #!/bin/bash
        if [ "$1" = -m ] && [ "$2" = pip ] && [ "$3" = install ]; then
            echo "$*" >> {log}
            exit 0
        fi
        {extra}exec {sys.executable} "$@"
    """))
    python.chmod(0o755)
    return venv, log


def run_setup(venv, path=None, **env):
    full = dict(os.environ, VENV=str(venv), PYTHON=sys.executable, **env)
    full.pop('PIP_FIND_LINKS', None)
    full.pop('CXX', None)
    if path is not None:
        full['PATH'] = path
    return subprocess.run(['bash', SETUP], cwd=ROOT, capture_output=True,
                          text=True, timeout=300, env=full)


def test_complete_environment_is_left_alone(tmp_path):
    venv, log = fake_venv(tmp_path)
    done = run_setup(venv)
    assert done.returncode == 0, done.stdout + done.stderr
    assert 'environment ready' in done.stdout
    assert not log.exists()  # not a single pip install


def test_broken_mmcv_ops_are_rebuilt_not_reported_ready(tmp_path):
    venv, log = fake_venv(tmp_path, broken_ops=True)
    done = run_setup(venv)
    out = done.stdout + done.stderr
    assert 'its ops do not import; rebuilding it' in out
    calls = log.read_text()
    assert '--force-reinstall --no-deps --no-cache-dir mmcv==2.1.0' in calls
    assert '--no-build-isolation' in calls
    # The fake reinstall mends nothing: the script says so and fails.
    assert done.returncode != 0
    assert 'ops still do not import' in out
    assert 'environment ready' not in out


def test_missing_compiler_fails_before_the_build(tmp_path):
    venv, log = fake_venv(tmp_path, broken_ops=True)
    bin_dir = tmp_path / 'bin'
    bin_dir.mkdir()
    for tool in ('bash', 'grep', 'sed', 'env'):
        os.symlink(shutil.which(tool), bin_dir / tool)
    done = run_setup(venv, path=str(bin_dir))
    assert done.returncode != 0
    assert 'no C++ compiler found' in done.stderr
    assert not log.exists() or 'mmcv' not in log.read_text()


def test_venv_without_pip_is_repaired(tmp_path):
    venv = tmp_path / 'venv'
    subprocess.run([sys.executable, '-m', 'venv', '--without-pip',
                    str(venv)], check=True)
    assert subprocess.run([str(venv / 'bin' / 'python'), '-m', 'pip',
                           '--version'], capture_output=True).returncode
    # No index: the first download after the repair fails, fast.
    done = run_setup(venv, PIP_NO_INDEX='1')
    assert 'has no pip; installing it with ensurepip' in done.stdout
    assert subprocess.run([str(venv / 'bin' / 'python'), '-m', 'pip',
                           '--version'], capture_output=True).returncode == 0
