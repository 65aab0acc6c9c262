"""tools/setup_env.sh repairs what it used to report as ready: a venv
without pip, mmcv whose compiled ops do not import; it checks for a C++
compiler before the long build; it keeps torchvision only where it works
with the installed torch; and it does nothing when all is there.

pip never installs for real here: the fake venv's ``python`` runs this
interpreter but logs ``-m pip install`` / ``uninstall`` calls instead, and
the venv without pip
gets an index-less pip that cannot download."""
import os
import os.path as osp
import shutil
import subprocess
import sys
import textwrap

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
SETUP = osp.join(ROOT, 'tools', 'setup_env.sh')


def shadow_package(tmp_path, module: str, error: str) -> str:
    """A directory holding package ``module`` (dotted) whose import raises
    ImportError(error), for PYTHONPATH."""
    root = tmp_path / 'shadow'
    parts = module.split('.')
    for i in range(1, len(parts) + 1):
        pkg = root.joinpath(*parts[:i])
        pkg.mkdir(parents=True, exist_ok=True)
        init = pkg / '__init__.py'
        if i == len(parts):
            init.write_text(f'raise ImportError({error!r})\n')
        elif not init.exists():
            init.write_text('')
    return str(root)


def torchvision_works() -> bool:
    try:
        import torch
        from torchvision.ops import nms
        nms(torch.zeros(1, 4), torch.ones(1), 0.5)
        return True
    except Exception:
        return False


def torch_pair() -> str:
    """The installed torch and torchvision, as the set-up stamps them."""
    import importlib.metadata as md

    def version(name):
        try:
            return md.version(name)
        except md.PackageNotFoundError:
            return 'none'

    return f"torch {version('torch')} torchvision {version('torchvision')}"


def fake_venv(tmp_path, broken_ops=False, broken_torchvision=False):
    """A venv whose python is this one, with pip installs and uninstalls
    logged, not run (and, with ``broken_ops``, an mmcv package whose ops fail
    to import, as after a torch change; with ``broken_torchvision``, a
    torchvision built for another torch)."""
    venv, log = tmp_path / 'venv', tmp_path / 'pip.log'
    (venv / 'bin').mkdir(parents=True)
    shadow = None
    if broken_ops:
        shadow = shadow_package(tmp_path, 'mmcv.ops',
                                '_ext.so: undefined symbol')
    if broken_torchvision:
        shadow = shadow_package(tmp_path, 'torchvision',
                                'operator torchvision::nms does not exist')
    elif not torchvision_works():
        # No torchvision works with this torch: as after a try that failed.
        (venv / '.torchvision-checked').write_text(torch_pair() + '\n')
    extra = f'export PYTHONPATH={shadow}\n' if shadow else ''
    python = venv / 'bin' / 'python'
    python.write_text(
        textwrap.dedent(f"""\
        #!/bin/bash
        if [ "$1" = -m ] && [ "$2" = pip ] && \\
            {{ [ "$3" = install ] || [ "$3" = uninstall ]; }}; then
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
    assert subprocess.run(
        [str(venv / 'bin' / 'python'), '-m', 'pip', '--version'],
        capture_output=True).returncode
    # No index: the first download after the repair fails, fast.
    done = run_setup(venv, PIP_NO_INDEX='1')
    assert 'has no pip; installing it with ensurepip' in done.stdout
    assert subprocess.run(
        [str(venv / 'bin' / 'python'), '-m', 'pip', '--version'],
        capture_output=True).returncode == 0


def test_torchvision_is_installed_only_where_it_works(tmp_path):
    with open(osp.join(ROOT, 'requirements', 'torchvision.txt')) as f:
        pin = [
            line.strip() for line in f
            if line.strip() and not line.startswith('#')
        ][0]
    venv, log = fake_venv(tmp_path, broken_torchvision=True)
    done = run_setup(venv)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    calls = log.read_text().splitlines()
    assert any('install' in c and f'--no-deps {pin}' in c
               for c in calls), calls
    # The fake install mends nothing: it is removed again, and said so.
    assert any('uninstall' in c and 'torchvision' in c for c in calls)
    assert f'no {pin} that works with torch' in out
    assert 'download.pytorch.org/whl/cpu' in out
    assert 'environment ready' in out
    # Not tried again for the same torch.
    log.unlink()
    again = run_setup(venv)
    assert again.returncode == 0, again.stdout + again.stderr
    assert not log.exists()
