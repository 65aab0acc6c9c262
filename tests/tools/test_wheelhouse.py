"""tools/gpu/wheelhouse.py: the completeness check of a wheelhouse on small
made-up wheels (no network), and the lists it reads."""
import importlib.util
import io
import os.path as osp
import tarfile
import zipfile

import pytest
from packaging.requirements import Requirement

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
IMAGE = {
    'numpy': '2.5.2', 'scipy': None, 'opencv-python-headless': None,
    'setuptools': None
}


@pytest.fixture(scope='module')
def wh():
    spec = importlib.util.spec_from_file_location(
        'wheelhouse', osp.join(ROOT, 'tools', 'gpu', 'wheelhouse.py'))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def wheel(dest, name, version, tag='py3-none-any', requires=()):
    path = dest / f'{name}-{version}-{tag}.whl'
    meta = (f'Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n' +
            ''.join(f'Requires-Dist: {r}\n' for r in requires))
    with zipfile.ZipFile(path, 'w') as zf:
        zf.writestr(f'{name}-{version}.dist-info/METADATA', meta)
        zf.writestr(f'{name}/__init__.py', '')
    return path


def sdist(dest, name, version, requires_txt):
    (dest / 'src').mkdir(exist_ok=True)
    path = dest / 'src' / f'{name}-{version}.tar.gz'
    with tarfile.open(path, 'w:gz') as tf:
        data = requires_txt.encode()
        info = tarfile.TarInfo(f'{name}-{version}/{name}.egg-info/'
                               'requires.txt')
        info.size = len(data)
        tf.addfile(info, io.BytesIO(data))
    return path


def test_a_complete_set_passes(wh, tmp_path):
    wheel(
        tmp_path, 'alpha', '1.0', requires=[
            'beta>=1', 'numpy>=1.26', 'opencv-python>=3',
            "tomli; python_version < '3.11'", "pytest; extra == 'test'",
            "pywin32; sys_platform == 'win32'"
        ])
    wheel(tmp_path, 'beta', '1.2', tag='cp312-abi3-manylinux_2_28_x86_64')
    wheel(tmp_path, 'gamma', '0.1', tag='cp310-abi3-manylinux2014_x86_64')
    wheel(tmp_path, 'setuptools', '80.10.2')  # carried over the image's
    sdist(
        tmp_path, 'mmcv', '2.1.0',
        'alpha\nbeta\n\n[:sys_platform == "win32"]\nregex\n\n[all]\n'
        'onnx\n')
    problems, left = wh.check(str(tmp_path), IMAGE, 2**20)
    assert problems == []
    # The image's numpy meets numpy>=1.26; OpenCV's version is not known.
    assert left == [
        dict(required_by='alpha-1.0-py3-none-any.whl',
             requirement='opencv-python>=3', image=None)
    ]


def test_missing_and_conflicting_requirements(wh, tmp_path):
    wheel(tmp_path, 'alpha', '1.0', requires=['beta>=2', 'delta'])
    wheel(tmp_path, 'beta', '1.0')
    sdist(tmp_path, 'mmcv', '2.1.0', 'epsilon\n')
    problems, _ = wh.check(str(tmp_path), IMAGE, 2**20)
    assert 'alpha-1.0-py3-none-any.whl requires beta>=2, carried: 1.0' \
        in problems
    assert ('alpha-1.0-py3-none-any.whl requires delta: neither carried nor '
            'on the image') in problems
    assert ('mmcv-2.1.0.tar.gz requires epsilon: neither carried nor on the '
            'image') in problems


@pytest.mark.parametrize(
    'tag',
    [
        'cp311-cp311-manylinux_2_17_x86_64',  # another Python
        'cp312-cp312-manylinux_2_34_x86_64',  # a newer glibc than promised
        'cp312-cp312-macosx_11_0_arm64',
        'cp312-cp312-linux_x86_64',  # built here, not portable
    ])
def test_wheels_that_do_not_install_on_the_target(wh, tmp_path, tag):
    wheel(tmp_path, 'alpha', '1.0', tag=tag)
    problems, _ = wh.check(str(tmp_path), IMAGE, 2**20)
    assert problems == [
        f'alpha-1.0-{tag}.whl: none of its tags installs on '
        'CPython 3.12, manylinux_2_28 x86_64'
    ]


def test_two_versions_an_image_package_and_the_size(wh, tmp_path):
    wheel(tmp_path, 'beta', '1.0')
    wheel(tmp_path, 'beta', '2.0')
    wheel(tmp_path, 'numpy', '1.26.4', tag='cp312-cp312-manylinux_2_17_x86_64')
    problems, _ = wh.check(str(tmp_path), IMAGE, 100)
    assert any(p.startswith('beta: 2 versions') for p in problems)
    assert any(
        p.startswith('numpy-1.26.4') and 'the image has numpy' in p
        for p in problems)
    assert any('over the 0 MiB limit' in p for p in problems)


def test_only_mmcv_comes_as_sources(wh, tmp_path):
    sdist(tmp_path, 'alpha', '1.0', '')
    problems, _ = wh.check(str(tmp_path), IMAGE, 2**20)
    assert problems == [
        "alpha-1.0.tar.gz: only ['mmcv'] are carried as "
        'sources'
    ]


def test_check_command_line(wh, tmp_path, capsys):
    wheel(tmp_path, 'alpha', '1.0', requires=['delta'])
    with pytest.raises(SystemExit) as exit_info:
        wh.main(['--check', '--dest', str(tmp_path)])
    assert exit_info.value.code == 1
    assert 'requires delta' in capsys.readouterr().err
    with pytest.raises(SystemExit):
        wh.main(['--check', '--dest', str(tmp_path / 'missing')])
    assert 'missing: no such folder' in capsys.readouterr().err


def test_modules_to_import_are_the_importable_top_level_names(wh, tmp_path):
    path = wheel(tmp_path, 'fast_sort', '1.0', tag='cp312-cp312-linux_x86_64')
    with zipfile.ZipFile(path, 'a') as zf:
        for name in ('fast_sort_cli.py', '_private.py',
                     'fast_sort_ext.cpython-312-x86_64-linux-gnu.so',
                     '24eba0d76380778f559b__mypyc.cpython-312-x86_64-'
                     'linux-gnu.so', 'fast_sort.libs/libz.so'):
            zf.writestr(name, '')
    assert wh.top_level_modules(wh.Dist(
        str(path))) == ['fast_sort', 'fast_sort_cli', 'fast_sort_ext']


def test_egg_info_requires(wh):
    reqs = wh.egg_info_requires('a\nb>=2\n\n[:sys_platform == "win32"]\nc\n'
                                '\n[tests]\nd\n\n[all:python_version<"3"]\n'
                                'e\n')
    assert [str(r)
            for r in reqs] == ['a', 'b>=2', 'c; sys_platform == "win32"']
    assert [wh.applies(r) for r in reqs] == [True, True, False]


def test_constraints_narrow_a_requirement(wh):
    limits = {'pot': Requirement('pot<0.9.7')}
    narrowed = wh.constrained(Requirement('pot>=0.9.6'), limits)
    assert narrowed.specifier.contains('0.9.6.post1')
    assert not narrowed.specifier.contains('0.9.7.post1')
    assert wh.constrained(Requirement('shapely'), limits) == \
        Requirement('shapely')


def test_project_lists_read(wh, tmp_path):
    image = wh.read_image_packages()
    assert image['torch'] == '2.11.0' and 'numpy' in image
    assert 'mmdet' not in image and 'shapely' not in image
    roots = {r.name for r, _ in wh.project_roots()}
    assert {'mmcv', 'mmdet', 'mmsegmentation', 'pot', 'setuptools'} <= roots
    # MMPretrain breaks mmdet's import beside the image's transformers
    assert 'mmpretrain' not in roots
    bad = tmp_path / 'image.txt'
    bad.write_text('numpy==2.5.2\ntorch >= 2\n')
    with pytest.raises(wh.WheelhouseError, match=r'image.txt:2: expected'):
        wh.read_image_packages(str(bad))
