"""The wheelhouse for the GPU machine: every package the project needs that
the machine's image lacks, downloaded here for CPython 3.12 on manylinux
x86_64, with mmcv's sources for its CUDA build there; and the check that
the set is complete.

    python tools/gpu/wheelhouse.py [--dest wheelhouse] [--max-mib 60]
    python tools/gpu/wheelhouse.py --check [--dest wheelhouse]
        [--python /path/to/python3.12]

Run it with the project's environment (``make env``): it needs pip and
``packaging``, and mmcv's sources are fetched with its build requirements
(requirements/build.txt) already installed. What the image has is
``tools/gpu/image_packages.txt``. The roots are the project's requirement
files; their dependencies are followed through each wheel's metadata, with
the environment markers evaluated for the target and the limits of
``tools/gpu/constraints.txt`` added. ``--dest`` then holds
``*.whl`` (installed together, ``pip install --no-index --no-deps
--target``), ``src/mmcv-<version>.tar.gz`` and ``MANIFEST.json`` (each
file's version, sha256 and who requires it; each requirement left to the
image against its specifier). The set is rebuilt in place: files already
there are reused, files no longer needed are removed.

The check (also run after every download) reads only the folder: each
wheel installs on the target (its tags), one version per project, every
requirement met by a carried file or by the image, the whole under
``--max-mib``. With ``--python`` (a CPython 3.12 here), it also installs
the set into a scratch ``--target`` with ``--no-index`` next to the image's
numpy and scipy versions and imports every carried module that does not
need the image's torch or OpenCV.
"""
import argparse
import email.parser
import hashlib
import json
import os
import os.path as osp
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile

from packaging import tags
from packaging.requirements import Requirement
from packaging.utils import (canonicalize_name, parse_sdist_filename,
                             parse_wheel_filename)

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
IMAGE_LIST = osp.join(ROOT, 'tools', 'gpu', 'image_packages.txt')
CONSTRAINTS = osp.join(ROOT, 'tools', 'gpu', 'constraints.txt')
#: Requirement files whose packages the GPU run needs (torch.txt's torch is
#: the image's own). Not pretrain.txt: beside the image's transformers 5,
#: MMPretrain 1.2.0 fails on import (its BLIP model subclasses a
#: PreTrainedModel that it finds None), and mmdet imports MMPretrain
#: whenever it is installed, so carrying it breaks every model.
REQUIREMENT_FILES = ('torch', 'build', 'mmcv', 'runtime', 'tests')

PYTHON = (3, 12)
#: The image's torch is a manylinux_2_28 wheel, so its glibc is 2.28 or
#: newer; wheels for a newer glibc are not carried.
MAX_GLIBC_MINOR = 28
PLATFORMS = (
    [f'manylinux_2_{n}_x86_64' for n in range(MAX_GLIBC_MINOR, 4, -1)] +
    ['manylinux2014_x86_64', 'manylinux2010_x86_64', 'manylinux1_x86_64'])
MARKER_ENV = dict(python_version='3.12', python_full_version='3.12.3',
                  implementation_name='cpython',
                  implementation_version='3.12.3',
                  platform_python_implementation='CPython',
                  sys_platform='linux', platform_system='Linux',
                  platform_machine='x86_64', os_name='posix', extra='')

#: Carried although the image has the package: the reason.
CARRIED_OVER_IMAGE = {
    'setuptools': 'mmengine resolves package-scoped configs (mmdet::...) '
    'and mmcv builds with pkg_resources, which setuptools 81 removed; the '
    "image's setuptools version is not known",
}
#: Met by another distribution of the same module.
PROVIDED_BY = {'opencv-python': 'opencv-python-headless'}
#: Carried as sources: compiled on the GPU machine.
SOURCE_ONLY = {'mmcv'}

#: What the compiled wheels link against on the image, installed beside the
#: set for the import check only (never carried).
IMPORT_CHECK_IMAGE = ('numpy', 'scipy')


class WheelhouseError(RuntimeError):
    pass


def read_image_packages(path=IMAGE_LIST):
    """``{canonical name: version or None}`` of the image's packages."""
    packages = {}
    with open(path) as f:
        for number, line in enumerate(f, 1):
            line = line.split('#', 1)[0].strip()
            if not line:
                continue
            name, _, version = line.partition('==')
            if not re.fullmatch(r'[A-Za-z0-9][A-Za-z0-9._-]*', name.strip()):
                raise WheelhouseError(f'{path}:{number}: expected NAME or '
                                      f'NAME==VERSION, got {line!r}')
            packages[canonicalize_name(name)] = version.strip() or None
    return packages


def read_requirement_file(path):
    with open(path) as f:
        lines = (line.split('#', 1)[0].strip() for line in f)
        return [Requirement(line) for line in lines if line]


def applies(req):
    """Whether ``req`` applies on the target, without extras."""
    return req.marker is None or req.marker.evaluate(dict(MARKER_ENV))


def target_tags():
    """Every wheel tag CPython 3.12 on the image accepts."""
    return (set(tags.cpython_tags(PYTHON, abis=['cp312'], platforms=PLATFORMS))
            | set(tags.compatible_tags(PYTHON, 'cp312', PLATFORMS)))


# -- reading distributions --------------------------------------------------


def wheel_metadata(path):
    with zipfile.ZipFile(path) as zf:
        names = [
            n for n in zf.namelist()
            if re.fullmatch(r'[^/]+\.dist-info/METADATA', n)
        ]
        if len(names) != 1:
            raise WheelhouseError(f'{path}: expected one .dist-info/METADATA,'
                                  f' found {len(names)}')
        return email.parser.Parser().parsestr(zf.read(names[0]).decode())


def egg_info_requires(text):
    """Requirements of an sdist's ``*.egg-info/requires.txt``: the
    unconditional ones and those of ``[:marker]`` sections (extras are
    left out)."""
    reqs, marker = [], None
    for line in text.splitlines():
        line = line.strip()
        if not line:
            continue
        if line.startswith('['):
            extra, _, cond = line[1:-1].partition(':')
            marker = 'skip' if extra else (cond or None)
            continue
        if marker == 'skip':
            continue
        reqs.append(
            Requirement(line if marker is None else f'{line}; {marker}'))
    return reqs


class Dist:
    """One carried file: a wheel, or an sdist compiled on the target."""

    def __init__(self, path):
        self.path = path
        self.file = osp.basename(path)
        if self.file.endswith('.whl'):
            name, version, _, self.tags = parse_wheel_filename(self.file)
            meta = wheel_metadata(path)
            self.requires = [
                Requirement(r) for r in meta.get_all('Requires-Dist') or []
            ]
        else:
            name, version = parse_sdist_filename(self.file)
            self.tags = None
            with tarfile.open(path) as tf:
                member = next((m for m in tf.getmembers()
                               if m.name.endswith('.egg-info/requires.txt')),
                              None)
                text = (tf.extractfile(member).read().decode()
                        if member else '')
            self.requires = egg_info_requires(text)
        self.name, self.version = canonicalize_name(name), version

    def sha256(self):
        digest = hashlib.sha256()
        with open(self.path, 'rb') as f:
            for block in iter(lambda: f.read(1 << 20), b''):
                digest.update(block)
        return digest.hexdigest()


def carried(dest):
    """The carried files of ``dest``: wheels and ``src/`` sdists."""
    paths = [
        osp.join(dest, f) for f in sorted(os.listdir(dest))
        if f.endswith('.whl')
    ]
    src = osp.join(dest, 'src')
    if osp.isdir(src):
        paths += [
            osp.join(src, f) for f in sorted(os.listdir(src))
            if f.endswith('.tar.gz')
        ]
    return [Dist(p) for p in paths]


# -- the check ----------------------------------------------------------------


def check(dest, image, max_bytes):
    """Problems of the set in ``dest`` (empty: complete and installable),
    and the requirements left to the image against their specifier."""
    if not osp.isdir(dest):
        raise WheelhouseError(f'--dest {dest}: no such folder')
    dists = carried(dest)
    problems, left_to_image = [], []
    ok_tags = target_tags()
    by_name = {}
    for d in dists:
        by_name.setdefault(d.name, []).append(d)
        if d.tags is not None and not d.tags & ok_tags:
            problems.append(f'{d.file}: none of its tags installs on CPython '
                            f'3.12, manylinux_2_{MAX_GLIBC_MINOR} x86_64')
        if d.tags is None and d.name not in SOURCE_ONLY:
            problems.append(f'{d.file}: only {sorted(SOURCE_ONLY)} are '
                            f'carried as sources')
        if d.name in image and d.name not in CARRIED_OVER_IMAGE:
            problems.append(f'{d.file}: the image has {d.name}; carrying it '
                            f'would shadow the image\'s build')
    for name, group in by_name.items():
        if len(group) > 1:
            problems.append(f'{name}: {len(group)} versions '
                            f'({", ".join(d.file for d in group)})')
    for d in dists:
        for req in d.requires:
            if not applies(req):
                continue
            name = canonicalize_name(req.name)
            name = PROVIDED_BY.get(name, name)
            if name in by_name:
                version = by_name[name][0].version
                if not req.specifier.contains(version, prereleases=True):
                    problems.append(f'{d.file} requires {req}, carried: '
                                    f'{version}')
            elif name in image:
                version = image[name]
                if req.specifier and (version is None
                                      or not req.specifier.contains(
                                          version, prereleases=True)):
                    left_to_image.append(
                        dict(required_by=d.file, requirement=str(req),
                             image=version))
            else:
                problems.append(f'{d.file} requires {req}: neither carried '
                                f'nor on the image')
    total = sum(osp.getsize(d.path) for d in dists)
    if total > max_bytes:
        problems.append(f'{total / 2**20:.1f} MiB in all, over the '
                        f'{max_bytes / 2**20:.0f} MiB limit')
    return problems, left_to_image


def top_level_modules(dist):
    """Importable top-level module names of a wheel."""
    with zipfile.ZipFile(dist.path) as zf:
        names = zf.namelist()
    modules = set()
    for n in names:
        head = n.split('/')[0]
        if head.endswith(('.dist-info', '.data', '.libs')):
            continue
        if '/' in n and n.split('/')[1] == '__init__.py':
            modules.add(head)
        elif '/' not in n and n.endswith('.py'):
            modules.add(n[:-3])
        elif '/' not in n and n.endswith('.so'):
            modules.add(n.split('.')[0])
    # A name that is no identifier (mypyc's helper ``<hash>__mypyc``, say)
    # is loaded by its package, never by an import statement.
    return sorted(m for m in modules
                  if not m.startswith('_') and m.isidentifier())


def import_check(dest, python, image):
    """Install the set with ``python`` (a CPython 3.12) into a scratch
    ``--target`` with ``--no-index``, beside the image's versions of
    :data:`IMPORT_CHECK_IMAGE`, and import each carried module. Returns
    ``(imported, skipped, failures)``; a module that stops at an image
    package not emulated here (torch, cv2, ...) is skipped, naming it."""
    out = subprocess.run([
        python, '-c', 'import sys; print(sys.version_info'
        '[:2] == (3, 12))'
    ], capture_output=True, text=True)
    if out.stdout.strip() != 'True':
        raise WheelhouseError(f'--python {python}: not a CPython 3.12 '
                              f'({out.stderr.strip() or out.stdout.strip()})')
    wheels = [d for d in carried(dest) if d.tags is not None]
    scratch = tempfile.mkdtemp(prefix='wheelhouse-check-')
    try:
        site = osp.join(scratch, 'site')
        image_site = osp.join(scratch, 'image')
        pip = [
            python, '-m', 'pip', 'install', '-q', '--no-deps', '--no-compile',
            '--disable-pip-version-check'
        ]
        subprocess.run(
            pip + ['--no-index', '--target', site] + [d.path for d in wheels],
            check=True)
        pins = [
            f'{n}=={image[n]}' if image.get(n) else n
            for n in IMPORT_CHECK_IMAGE
        ]
        subprocess.run(
            pip + ['--only-binary=:all:', '--target', image_site] + pins,
            check=True)
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([site, image_site]))
        imported, skipped, failures = [], [], []
        for d in wheels:
            for module in top_level_modules(d):
                done = subprocess.run([python, '-c', f'import {module}'],
                                      env=env, cwd=scratch,
                                      capture_output=True, text=True)
                missing = re.search(r"No module named '([^'.]+)", done.stderr)
                if done.returncode == 0:
                    imported.append(module)
                elif missing and canonicalize_name(
                        missing.group(1)) not in {d.name
                                                  for d in wheels}:
                    skipped.append(f'{module} (needs {missing.group(1)})')
                else:
                    failures.append(f'{module} ({d.file}): ' +
                                    done.stderr.strip().splitlines()[-1])
        return imported, skipped, failures
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


# -- building the set ---------------------------------------------------------


def pip_download(req, into, source):
    cmd = [
        sys.executable, '-m', 'pip', 'download', '--no-deps',
        '--disable-pip-version-check', '-q', '-d', into
    ]
    if source:
        # The sdist's metadata is prepared with the build requirements
        # already installed here (mmcv's setup.py imports pkg_resources).
        cmd += ['--no-binary=:all:', '--no-build-isolation']
    else:
        cmd += [
            '--only-binary=:all:', '--implementation', 'cp',
            '--python-version', '.'.join(map(str, PYTHON)), '--abi', 'cp312',
            '--abi', 'abi3', '--abi', 'none'
        ]
        for platform in PLATFORMS:
            cmd += ['--platform', platform]
    done = subprocess.run(cmd + [str(req)], capture_output=True, text=True)
    files = os.listdir(into)
    if done.returncode or len(files) != 1:
        return None, done.stderr.strip()
    return osp.join(into, files[0]), ''


def pure_wheel_from_sdist(req, into):
    """A wheel built here from ``req``'s sdist: only for pure-Python
    projects (a compiled one would be for this machine's Python)."""
    sdist, err = pip_download(req, osp.join(into, 'sdist'), source=True)
    if sdist is None:
        raise WheelhouseError(f'{req}: no wheel for CPython 3.12 and no '
                              f'sdist ({err[-400:]})')
    subprocess.run([
        sys.executable, '-m', 'pip', 'wheel', '--no-deps', '-q',
        '--disable-pip-version-check', '-w', into, sdist
    ], check=True)
    wheels = [f for f in os.listdir(into) if f.endswith('.whl')]
    tag_sets = [parse_wheel_filename(f)[3] for f in wheels]
    if len(wheels) != 1 or not all(t.platform == 'any' and t.abi == 'none'
                                   for t in tag_sets[0]):
        raise WheelhouseError(f'{req}: no wheel for CPython 3.12, and its '
                              f'sdist builds {wheels}, not one pure-Python '
                              f'wheel')
    return osp.join(into, wheels[0])


def fetch(req, dest, work):
    """The file for ``req`` in ``dest``: one already there that satisfies
    it, else downloaded."""
    name = canonicalize_name(req.name)
    source = name in SOURCE_ONLY
    for d in carried(dest):
        if d.name == name and req.specifier.contains(d.version,
                                                     prereleases=True):
            return d
    into = tempfile.mkdtemp(dir=work)
    path, err = pip_download(req, into, source)
    if path is None and not source:
        path = pure_wheel_from_sdist(req, into)
    elif path is None:
        raise WheelhouseError(f'{req}: could not download its sources '
                              f'({err[-400:]})')
    target_dir = osp.join(dest, 'src') if source else dest
    os.makedirs(target_dir, exist_ok=True)
    final = osp.join(target_dir, osp.basename(path))
    shutil.move(path, final)
    print(f'  + {osp.basename(final)}', flush=True)
    return Dist(final)


def constrained(req, constraints):
    """``req`` with the specifier of its constraint added."""
    extra = constraints.get(canonicalize_name(req.name))
    if extra is None:
        return req
    return Requirement(f'{req.name}{req.specifier & extra.specifier}')


def resolve(dest, image, roots, constraints):
    """Fetch the closure of ``roots`` (``(requirement, origin)``) minus the
    image, within ``constraints`` (``{name: Requirement}``); returns
    ``{name: (Dist, [origins])}`` and the requirements left to the image
    against their specifier."""
    chosen, left_to_image = {}, []
    queue = list(roots)
    work = tempfile.mkdtemp(prefix='wheelhouse-')
    try:
        while queue:
            req, origin = queue.pop(0)
            if not applies(req):
                continue
            name = canonicalize_name(req.name)
            name = PROVIDED_BY.get(name, name)
            if name in image and name not in CARRIED_OVER_IMAGE:
                version = image[name]
                if req.specifier and (version is None
                                      or not req.specifier.contains(
                                          version, prereleases=True)):
                    left_to_image.append(
                        dict(required_by=origin, requirement=str(req),
                             image=version))
                continue
            if name in chosen:
                dist, origins = chosen[name]
                if not req.specifier.contains(dist.version, prereleases=True):
                    raise WheelhouseError(
                        f'{origin} requires {req}, but {dist.file} was '
                        f'chosen for {", ".join(origins)}')
                origins.append(origin)
                continue
            dist = fetch(constrained(req, constraints), dest, work)
            chosen[name] = (dist, [origin])
            queue += [(r, dist.file) for r in dist.requires]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return chosen, left_to_image


def project_roots():
    roots = []
    for name in REQUIREMENT_FILES:
        path = osp.join(ROOT, 'requirements', f'{name}.txt')
        roots += [(r, f'requirements/{name}.txt')
                  for r in read_requirement_file(path)]
    return roots


def build(dest, image, max_bytes):
    os.makedirs(dest, exist_ok=True)
    constraints = {
        canonicalize_name(r.name): r
        for r in read_requirement_file(CONSTRAINTS)
    }
    chosen, left_to_image = resolve(dest, image, project_roots(), constraints)
    keep = {d.path for d, _ in chosen.values()}
    for d in carried(dest):
        if d.path not in keep:
            print(f'  - {d.file} (no longer needed)')
            os.remove(d.path)
    files = [
        dict(file=osp.relpath(d.path, dest), name=d.name,
             version=str(d.version), bytes=osp.getsize(d.path),
             sha256=d.sha256(), required_by=sorted(set(origins)))
        for d, origins in sorted(chosen.values(), key=lambda x: x[0].name)
    ]
    manifest = dict(python='.'.join(map(str, PYTHON)), platforms=PLATFORMS,
                    image_list=osp.relpath(IMAGE_LIST, ROOT),
                    carried_over_image=CARRIED_OVER_IMAGE,
                    left_to_image=left_to_image, files=files,
                    total_bytes=sum(f['bytes'] for f in files))
    with open(osp.join(dest, 'MANIFEST.json'), 'w') as f:
        json.dump(manifest, f, indent=1)
    return manifest


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--dest', default=osp.join(ROOT, 'wheelhouse'))
    parser.add_argument('--max-mib', type=float, default=60)
    parser.add_argument('--check', action='store_true',
                        help='check the folder only; download nothing')
    parser.add_argument(
        '--python', help='a CPython 3.12 to install and import the set '
        'with (scratch --target, --no-index)')
    args = parser.parse_args(argv)
    image = read_image_packages()
    max_bytes = int(args.max_mib * 2**20)
    try:
        problems, left_to_image = check(args.dest, image, max_bytes) \
            if args.check else ([], [])
        if not args.check:
            manifest = build(args.dest, image, max_bytes)
            print(f'{len(manifest["files"])} files, '
                  f'{manifest["total_bytes"] / 2**20:.1f} MiB in '
                  f'{args.dest}')
            problems, _ = check(args.dest, image, max_bytes)
            left_to_image = manifest['left_to_image']
        for item in left_to_image:
            print(f'left to the image: {item["requirement"]} '
                  f'({item["required_by"]}; image: '
                  f'{item["image"] or "version not known"})')
        if args.python and not problems:
            imported, skipped, failures = import_check(args.dest, args.python,
                                                       image)
            print(f'imported with {args.python}: '
                  f'{", ".join(sorted(set(imported)))}')
            if skipped:
                print(f'not imported here: {", ".join(skipped)}')
            problems += [f'import {f}' for f in failures]
    except WheelhouseError as err:
        parser.exit(1, f'error: {err}\n')
    if problems:
        parser.exit(
            1,
            'wheelhouse incomplete:\n' + ''.join(f'  {p}\n' for p in problems))
    print(f'wheelhouse complete: {args.dest}')


if __name__ == '__main__':
    main()
