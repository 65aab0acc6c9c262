"""The GPU run in one command: install, build, test and measure.

Each stage has its own time limit; every result goes into one folder.

    python3 tools/gpu_suite.py OUT [--wheelhouse wheelhouse]
        [--work /tmp/mmhgw-gpu] [--budget 540] [--stages A,B] [--skip A,B]
        [--train-iters 300] [--det-iters 100] [--archive FILE] [--dry-run]
        [--study-args "ARGS"] [--study-jobs 8] [--study-runs FILE]

Made for a machine with no network whose Python already has a CUDA torch,
Triton, numpy, OpenCV and scipy (tools/gpu/image_packages.txt): everything
else comes from the wheelhouse that tools/gpu/wheelhouse.py downloads
beforehand. The stages, in order:

install              the wheelhouse into WORK/site (``pip install --target
                     --no-index``; kept for the next run on the machine),
                     then an import of each package that carries compiled
                     code or that the models need
environment          device, driver, nvcc, Python, torch, CUDA, Triton,
                     numpy and the OpenMMLab versions
mmcv-build           mmcv's ops compiled with CUDA from the wheelhouse's
                     sources, in the background on the cores that the timed
                     stages leave (MAX_JOBS, this device's arch only). Once
                     per machine: the sources are unpacked once, a built
                     wheel is reused, and a build that an earlier run left
                     going (it runs in a session of its own) is waited for
mmhgw-ext            the C++ routing kernels for the CPU tests, also in
                     the background
data                 the demo sets (tools/make_demo_data.py) in WORK/data
test-cuda            tests/test_cuda.py
tune-triton          bench/tune_triton.py: the Triton kernels' tiles and
                     float32 products, timed and checked against float64
bench-op             bench/bench_op.py --device cuda --batches 1,2
                     --backends triton
bench-layer          bench/bench_layer.py --device cuda
train-unet           stock and HGWCaps UNet on the lesion set, --amp,
                     --train-iters iterations each: losses, time per
                     iteration, memory, mIoU
train-deeplabv3plus  the same for DeepLabV3+ R-50-D8
bench-mask-rcnn      bench/bench_models.py --group mask-rcnn --batch 2
                     --routings hgw (800x1333: inference, training step)
train-mask-rcnn      stock and HGWCaps Mask R-CNN on the shapes set, --amp,
                     --det-iters iterations each
tests                the whole test suite, in the background on the
                     build's cores once mmcv is built
study                tools/analysis/ablation_study.py with ``--study-args``
                     (its variants, seeds, family, data root, schedule),
                     ``--study-jobs`` runs at a time sharing the GPU, for
                     the rest of the budget; only with ``--study-args``.
                     Every run's results and logs (not its checkpoint), and
                     the logs of runs that failed or that the budget cut
                     short, go into OUT/logs/study-runs.tar.gz, in the
                     layout of the tool's ``--work-dir``, so that the tool
                     given them where they are unpacked (same options, the
                     data at the same path) writes the report without
                     training again. ``--study-runs`` unpacks such an
                     archive from an earlier machine into the study's
                     folder first, so that its finished runs are reused
                     and a study can span several loans of a GPU

The stages from data to train-deeplabv3plus need no mmcv op, but mmdet and
mmseg import them all: until the build is done they run against mmcv's
Python sources with a stand-in for the compiled ops that raises when an op
is called (tools/gpu/mmcv_ext_standin.py). A stage that fails, times out or
raises is recorded and the next one runs; one that would start with less
than a minute of ``--budget`` left is skipped, saying so. The timed stages
run on their own cores (``--timing-cpus``) apart from the builds and the
tests.

OUT/gpu_suite.json, rewritten after every stage, holds the environment
and, per stage, its status (ok, failed, timeout, error, skipped), seconds,
commands, logs and results; OUT/logs/ holds every log.
bench/write_gpu_benchmarks.py turns the JSON into the GPU sections of
docs/benchmarks.md.

``--dry-run`` runs on a CPU, in this environment (nothing installed or
built; the stand-in is made from the installed mmcv), every stage that a
CPU can at small sizes and one or two iterations, and records the others
as skipped with the reason.
"""
import argparse
import datetime
import glob
import json
import math
import os
import os.path as osp
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tarfile
import time
import traceback
import xml.etree.ElementTree as ET

ROOT = osp.dirname(osp.dirname(osp.abspath(__file__)))
STANDIN_EXT = osp.join(ROOT, 'tools', 'gpu', 'mmcv_ext_standin.py')
DEFAULT_WORK = '/tmp/mmhgw-gpu'

#: A stage does not start with less than this many seconds of the budget
#: left; this much is kept at the end for writing the results.
MIN_START_S = 60
RESERVE_S = 15

#: Stage name -> (time limit in seconds, whether it needs mmcv's ops).
STAGES = {
    'install': (150, False),
    'environment': (90, False),
    'mmcv-build': (600, False),
    'mmhgw-ext': (300, False),
    'data': (120, False),
    'test-cuda': (180, False),
    'tune-triton': (150, False),
    'bench-op': (150, False),
    'bench-layer': (120, False),
    'train-unet': (240, False),
    'train-deeplabv3plus': (240, False),
    'bench-mask-rcnn': (240, True),
    'train-mask-rcnn': (240, True),
    'tests': (480, True),
    'study': (3600, False),
}
FOREGROUND_BEFORE_OPS = ('data', 'test-cuda', 'tune-triton', 'bench-op',
                         'bench-layer', 'train-unet', 'train-deeplabv3plus',
                         'study')
FOREGROUND_AFTER_OPS = ('bench-mask-rcnn', 'train-mask-rcnn')
#: Stage -> the stages it cannot run without (added when it is selected).
NEEDS = {
    'train-unet': ('data', ),
    'train-deeplabv3plus': ('data', ),
    'train-mask-rcnn': ('data', 'mmcv-build'),
    'bench-mask-rcnn': ('mmcv-build', ),
    'tests': ('mmcv-build', 'mmhgw-ext'),
}
#: Skipped in a dry run, with the reason.
NOT_IN_DRY_RUN = {
    'install': 'dry run: uses this environment',
    'mmcv-build': 'dry run: needs CUDA and nvcc; uses the installed mmcv',
    'mmhgw-ext': 'dry run: uses the installed mmhgw._ext',
    'bench-mask-rcnn': 'dry run: Mask R-CNN at 800x1333 takes minutes per '
    'step on a CPU',
    'tests': 'dry run: it runs inside the test suite',
}

#: Training stage -> (kind, stock config, HGWCaps config).
TRAINING = {
    'train-unet': ('seg', 'configs/demo/unet-s5-d16_fcn_demo-isic.py',
                   'configs/demo/unet-hgwcaps-s5-d16_fcn_demo-isic.py'),
    'train-deeplabv3plus': (
        'seg', 'configs/demo/deeplabv3plus_r50-d8_demo-isic.py',
        'configs/demo/deeplabv3plus_hgwcaps-r50-d8_demo-isic.py'),
    'train-mask-rcnn': (
        'det', 'configs/demo/mask-rcnn_r50_fpn_demo-shapes.py',
        'configs/demo/mask-rcnn_hgwcaps-r50_fpn_demo-shapes.py'),
}

#: Imported after the install: compiled wheels and the model packages'
#: pure-Python requirements (mmdet and mmseg need mmcv: checked later).
INSTALL_IMPORTS = ('shapely.geometry', 'pycocotools.mask', 'pycocotools.coco',
                   'ot', 'wcwidth', 'terminaltables', 'prettytable',
                   'pkg_resources', 'mmengine', 'addict', 'yapf', 'ftfy')

ENV_PROBE = r'''
import json, os, platform, sys
from importlib import metadata
info = dict(python=platform.python_version(), executable=sys.executable,
            cpu_count=os.cpu_count())
import torch
info.update(torch=torch.__version__, cuda=torch.version.cuda,
            cudnn=torch.backends.cudnn.version(),
            cuda_available=torch.cuda.is_available())
if torch.cuda.is_available():
    props = torch.cuda.get_device_properties(0)
    info.update(device=props.name,
                capability=list(torch.cuda.get_device_capability(0)),
                device_memory_gib=round(props.total_memory / 2**30, 1),
                multiprocessors=props.multi_processor_count)
else:
    info.update(device='cpu', capability=None)
for dist in ('triton', 'numpy', 'scipy', 'opencv-python-headless',
             'opencv-python', 'setuptools', 'mmcv', 'mmengine', 'mmdet',
             'mmsegmentation', 'mmpretrain', 'shapely', 'pycocotools', 'pot'):
    try:
        info[dist] = metadata.version(dist)
    except metadata.PackageNotFoundError:
        info[dist] = None
print('ENV ' + json.dumps(info))
'''

IMPORT_PROBE = r'''
import importlib, json, sys, traceback
results = {}
for module in sys.argv[1:]:
    try:
        importlib.import_module(module)
        results[module] = 'ok'
    except Exception:
        traceback.print_exc()
        results[module] = traceback.format_exc().strip().splitlines()[-1]
print('IMPORTS ' + json.dumps(results))
'''

MMCV_OPS_PROBE = r'''
import torch
from mmcv.ops import nms, roi_align
boxes = torch.tensor([[0, 0, 10, 10], [1, 1, 11, 11], [20, 20, 30, 30.]])
scores = torch.tensor([0.9, 0.8, 0.7])
device = 'cuda' if torch.cuda.is_available() else 'cpu'
_, keep = nms(boxes.to(device), scores.to(device), 0.5)
assert keep.tolist() == [0, 2], keep
print('mmcv ops work on', device)
'''

# -- results ------------------------------------------------------------------


def json_line(text, tag):
    """The JSON after the last line starting with ``tag`` in ``text``."""
    for line in reversed(text.splitlines()):
        if line.startswith(tag + ' '):
            return json.loads(line[len(tag) + 1:])
    return None


def junit_summary(path, max_failures=50):
    """Counts of a pytest JUnit XML report and its failed test ids."""
    root = ET.parse(path).getroot()
    suites = [root] if root.tag == 'testsuite' else root.findall('testsuite')
    counts = dict(tests=0, failures=0, errors=0, skipped=0, seconds=0.0)
    failed = []
    for suite in suites:
        for key in ('tests', 'failures', 'errors', 'skipped'):
            counts[key] += int(suite.get(key, 0))
        counts['seconds'] += float(suite.get('time', 0))
        for case in suite.iter('testcase'):
            problem = case.find('failure')
            if problem is None:
                problem = case.find('error')
            if problem is not None and len(failed) < max_failures:
                message = (problem.get('message') or '').strip()
                failed.append(
                    f'{case.get("classname")}::{case.get("name")}'
                    f': {message.splitlines()[0][:300]}' if message else
                    f'{case.get("classname")}::{case.get("name")}')
    counts['passed'] = (counts['tests'] - counts['failures'] -
                        counts['errors'] - counts['skipped'])
    counts['seconds'] = round(counts['seconds'], 1)
    counts['failed'] = failed
    return counts


def training_summary(work_dir):
    """Losses, time per iteration, memory and the last validation of the
    mmengine run in ``work_dir`` (its ``*/vis_data/scalars.json``).

    Each training record holds the means over the logging interval; the
    time per iteration is the median of the records after the first (which
    holds the warm-up: cuDNN's search, Triton's compilation)."""
    files = sorted(
        glob.glob(osp.join(work_dir, '*', 'vis_data', 'scalars.json')))
    if not files:
        return dict(scalars=None)
    with open(files[-1]) as f:
        records = [json.loads(line) for line in f if line.strip()]
    train = [r for r in records if 'loss' in r]
    evals = [r for r in records if 'loss' not in r]
    losses = [r['loss'] for r in train]
    times = [r['time'] for r in train[1:]] or [r['time'] for r in train]
    memory = [r['memory'] for r in train if 'memory' in r]
    result = dict(
        scalars=files[-1], records=len(train),
        iters=train[-1]['iter'] if train else 0,
        loss_first=losses[0] if losses else None,
        loss_last=losses[-1] if losses else None, losses_finite=bool(losses)
        and all(math.isfinite(v) for v in losses),
        loss_curve=[[r['iter'], r['loss']] for r in train
                    ], iter_time_s=statistics.median(times) if times else None,
        memory_mib=max(memory) if memory else None)
    if evals:
        result['val'] = {
            k: v
            for k, v in evals[-1].items()
            if k not in ('data_time', 'time', 'step')
        }
    return result


def training_log_interval(iters, dry_run):
    return 1 if dry_run else min(10, iters)


def training_options(kind, iters, dry_run):
    """``--cfg-options`` that run a demo config for ``iters`` iterations
    with its schedule stretched to them, logging every
    :func:`training_log_interval` iterations the means over exactly those
    iterations, and saving no checkpoint; a dry run trains on two images a
    batch and skips the validation."""
    interval = training_log_interval(iters, dry_run)
    options = [
        f'train_cfg.max_iters={iters}', f'train_cfg.val_interval={iters}',
        f'default_hooks.logger.interval={interval}',
        f'log_processor.window_size={interval}',
        'default_hooks.checkpoint=None'
    ]
    if kind == 'seg':
        options.append(f'param_scheduler.0.end={iters}')
    else:
        options += [
            f'param_scheduler.1.end={iters}',
            f'param_scheduler.1.milestones=[{max(1, iters * 4 // 5)}]'
        ]
    if dry_run:  # ASPP pools to one value a channel: BN needs two images
        options += [
            'train_dataloader.batch_size=2', 'val_cfg=None',
            'val_dataloader=None', 'val_evaluator=None'
        ]
    return options


# -- processes ----------------------------------------------------------------


def launch(cmd, log_path, env, cwd, cpus=None, new_session=False):
    """Start ``cmd`` with its output appended to ``log_path``, in a process
    group of its own (so that a time-out ends all of it) or, with
    ``new_session``, in a session of its own (so that it outlives this
    process)."""
    os.makedirs(osp.dirname(log_path), exist_ok=True)
    log = open(log_path, 'ab')
    log.write(f'$ {shlex.join(cmd)}\n'.encode())
    log.flush()

    def prepare():
        if new_session:
            os.setsid()
        else:
            os.setpgid(0, 0)
        if cpus:
            os.sched_setaffinity(0, cpus)

    try:
        return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                env=env, cwd=cwd, preexec_fn=prepare)
    finally:
        log.close()


def wait(proc, timeout):
    """``(returncode, timed_out)``; on time-out the process group is ended
    (SIGTERM, then SIGKILL)."""
    try:
        return proc.wait(max(timeout, 0.1)), False
    except subprocess.TimeoutExpired:
        for sig, grace in ((signal.SIGTERM, 10), (signal.SIGKILL, 30)):
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                break
            try:
                proc.wait(grace)
                break
            except subprocess.TimeoutExpired:
                continue
        return proc.returncode, True


def alive(pid):
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    # A finished child that nobody waited for is a zombie, not alive.
    try:
        with open(f'/proc/{pid}/stat') as f:
            return f.read().split(')')[-1].split()[0] != 'Z'
    except OSError:
        return True


def tail(path, chars=3000):
    try:
        with open(path, errors='replace') as f:
            return f.read()[-chars:]
    except OSError:
        return ''


def unpack_study_runs(archive, runs):
    """The runs of a ``study-runs.tar.gz`` (from an earlier machine) into
    the study folder ``runs``, over what is there: the study reuses the
    finished ones and trains the rest. Members that would land outside
    ``runs`` (absolute paths, ``..``, links) are refused."""
    os.makedirs(runs, exist_ok=True)
    with tarfile.open(archive) as tf:
        tf.extractall(runs, filter='data')


class Stop(Exception):
    """Ends a stage with ``status`` and ``reason``."""

    def __init__(self, status, reason):
        super().__init__(reason)
        self.status, self.reason = status, reason


# -- the suite ----------------------------------------------------------------


class Suite:

    def __init__(self, args):
        self.args = args
        self.dry = args.dry_run
        self.out = osp.abspath(args.out)
        self.logs = osp.join(self.out, 'logs')
        self.work = osp.abspath(
            args.work
            or (osp.join(self.out, 'work') if self.dry else DEFAULT_WORK))
        self.wheelhouse = osp.abspath(args.wheelhouse)
        self.site = osp.join(self.work, 'site')
        self.mmcv_dir = osp.join(self.work, 'mmcv')
        self.standin = osp.join(self.work, 'standin')
        self.data = osp.join(self.work, 'data')
        self.python = sys.executable
        self.start = time.monotonic()
        self.deadline = self.start + args.budget
        cpus = sorted(os.sched_getaffinity(0))
        if len(cpus) >= 2 * args.timing_cpus + 2:
            self.timing_cpus = cpus[:args.timing_cpus]
            self.build_cpus = cpus[args.timing_cpus:]
        else:  # too few to split
            self.timing_cpus = self.build_cpus = cpus
        self.selected = self.select(args)
        self.ops = 'stand-in'  # or 'built' once mmcv's ops import
        self.mmcv_build = None  # dict(pid=..., started=...) while building
        self.ext_proc = None
        self.tests_job = None
        self.test_paths = ['tests']
        self.report = dict(
            schema=1, command='python ' +
            shlex.join([osp.relpath(osp.abspath(sys.argv[0]), ROOT)] +
                       sys.argv[1:]), date=datetime.date.today().isoformat(),
            started=datetime.datetime.now().isoformat(timespec='seconds'),
            dry_run=self.dry, budget_s=args.budget, work=self.work,
            cpus=dict(timing=self.timing_cpus,
                      build=self.build_cpus), environment={}, stages={})

    @staticmethod
    def select(args):
        names = list(STAGES)
        chosen = set(args.stages.split(',')) if args.stages else set(names)
        skip = set(args.skip.split(',')) if args.skip else set()
        unknown = (chosen | skip) - set(names)
        if unknown:
            raise SystemExit(f'--stages/--skip: unknown stage(s) '
                             f'{sorted(unknown)}; stages: {", ".join(names)}')
        chosen -= skip
        for name in list(chosen):
            chosen |= set(NEEDS.get(name, ())) - skip
        chosen |= {'environment'}
        if not args.dry_run:
            chosen |= {'install'}
        return chosen

    # -- bookkeeping --------------------------------------------------------

    def elapsed(self):
        return time.monotonic() - self.start

    def left(self):
        return self.deadline - time.monotonic()

    def save(self, pack=False):
        """Write the JSON; with ``pack`` (at the end of a stage), also the
        ``--archive``."""
        self.report['elapsed_s'] = round(self.elapsed(), 1)
        stages = self.report['stages']
        self.report['stages'] = {n: stages[n] for n in STAGES if n in stages}
        os.makedirs(self.out, exist_ok=True)
        path = osp.join(self.out, 'gpu_suite.json')
        with open(path + '.tmp', 'w') as f:
            json.dump(self.report, f, indent=1)
        os.replace(path + '.tmp', path)
        if pack and self.args.archive:
            self.pack()

    def pack(self):
        archive = osp.abspath(self.args.archive)
        with tarfile.open(archive + '.tmp', 'w:gz') as tf:
            for path in [osp.join(self.out, 'gpu_suite.json')] + sorted(
                    glob.glob(osp.join(self.logs, '*'))):
                if osp.isfile(path) and osp.abspath(path) != archive:
                    tf.add(path, osp.relpath(path, osp.dirname(self.out)))
        os.replace(archive + '.tmp', archive)

    def record(self, name, **fields):
        self.report['stages'].setdefault(name, {}).update(fields)
        self.save(pack=fields.get('status') != 'running')

    def skip_reason(self, name):
        if self.dry and name in NOT_IN_DRY_RUN:
            return NOT_IN_DRY_RUN[name]
        if name not in self.selected:
            return 'not selected'
        if name == 'study' and not self.args.study_args:
            return 'no --study-args'
        if self.left() < MIN_START_S:
            return (f'not started: {max(self.left(), 0):.0f} s of the '
                    f'{self.args.budget} s budget left')
        return None

    def stage(self, name, fn):
        """Run ``fn(timeout)`` as stage ``name``: it returns the stage's
        results (a dict) or raises :class:`Stop`; anything else it raises
        is recorded as an error. A background stage's ``fn`` returns
        ``state='running'`` when it has started something: the stage stays
        running until its ``settle_*`` method ends it. Never raises."""
        reason = self.skip_reason(name)
        if reason:
            self.record(name, status='skipped', reason=reason)
            return False
        limit = min(STAGES[name][0], self.left() - RESERVE_S)
        begin = time.monotonic()
        self.record(name, status='running', started_s=round(self.elapsed()),
                    limit_s=round(limit))
        print(f'[suite] {name} (limit {limit:.0f} s)', flush=True)
        try:
            result = fn(limit)
            status, reason = 'ok', None
        except Stop as stop:
            result, status, reason = None, stop.status, stop.reason
        except Exception:
            result, status = None, 'error'
            reason = traceback.format_exc()[-3000:]
        seconds = round(time.monotonic() - begin, 1)
        if isinstance(result, dict) and result.get('state') == 'running':
            status = 'running'
        fields = dict(status=status, seconds=seconds)
        if reason:
            fields['reason'] = reason
        if result is not None:
            fields['result'] = result
        self.record(name, **fields)
        print(
            f'[suite] {name}: ' +
            ('started' if status == 'running' else f'{status} in {seconds} s')
            + (f' ({reason.splitlines()[-1][:200]})' if reason else ''),
            flush=True)
        return status in ('ok', 'running')

    def command(self, name, cmd, timeout, cwd=ROOT, cpus=None, env=None,
                log=None):
        """Run ``cmd`` to its end or ``timeout``; its record (also appended
        to the stage's ``commands``)."""
        log = osp.join(self.logs, (log or name) + '.log')
        begin = time.monotonic()
        proc = launch(cmd, log, env or self.env(), cwd, cpus)
        returncode, timed_out = wait(proc, timeout)
        run = dict(command=shlex.join(cmd), returncode=returncode,
                   timed_out=timed_out, mmcv_ops=self.ops,
                   seconds=round(time.monotonic() - begin,
                                 1), log=osp.relpath(log, self.out))
        self.report['stages'].setdefault(name, {}).setdefault('commands',
                                                              []).append(run)
        self.save()
        return run

    def checked(self, name, cmd, timeout, **kwargs):
        run = self.command(name, cmd, timeout, **kwargs)
        if run['timed_out']:
            raise Stop('timeout', f'{run["command"]}: stopped after '
                       f'{timeout:.0f} s')
        if run['returncode']:
            raise Stop(
                'failed', f'{run["command"]}: exit '
                f'{run["returncode"]}; see {run["log"]}:\n' +
                tail(osp.join(self.out, run['log']), 1500))
        return run

    def env(self, extra=None):
        """The environment of every command: the repository first (its
        ``tests`` package must win over any in the wheelhouse), then mmcv
        (built, or the stand-in during the build), then the wheelhouse."""
        paths = [ROOT]
        if self.ops == 'built':
            if not self.dry:
                paths.append(osp.join(self.mmcv_dir, 'site'))
        elif osp.isdir(self.standin):
            paths.append(self.standin)
        if not self.dry:
            paths.append(self.site)
        if os.environ.get('PYTHONPATH'):
            paths.append(os.environ['PYTHONPATH'])
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(paths),
                   PYTHONUNBUFFERED='1', MPLBACKEND='Agg')
        env.update(extra or {})
        return env

    @property
    def device(self):
        return 'cpu' if self.dry else 'cuda'

    # -- set-up stages ------------------------------------------------------

    def install(self, limit):
        wheels = sorted(glob.glob(osp.join(self.wheelhouse, '*.whl')))
        if not wheels:
            raise Stop(
                'failed', f'no wheels in {self.wheelhouse}: make the '
                'wheelhouse with tools/gpu/wheelhouse.py where there '
                'is a network, and bring it along')
        stamp = '\n'.join(f'{osp.basename(w)} {osp.getsize(w)}'
                          for w in wheels)
        stamp_file = osp.join(self.site, '.wheelhouse')
        reused = osp.exists(stamp_file) and open(stamp_file).read() == stamp
        if not reused:
            # Always into a fresh folder: pip --target over an earlier
            # install leaves mixed versions behind.
            fresh = self.site + '.new'
            shutil.rmtree(fresh, ignore_errors=True)
            self.checked('install', [
                self.python, '-m', 'pip', 'install', '--no-index', '--no-deps',
                '--no-compile', '--disable-pip-version-check', '--target',
                fresh
            ] + wheels, limit)
            with open(osp.join(fresh, '.wheelhouse'), 'w') as f:
                f.write(stamp)
            shutil.rmtree(self.site, ignore_errors=True)
            os.replace(fresh, self.site)
        imports = self.import_check('install', INSTALL_IMPORTS)
        failed = {m: e for m, e in imports.items() if e != 'ok'}
        if failed:
            raise Stop(
                'failed', 'installed, but these do not import: ' +
                '; '.join(f'{m}: {e}' for m, e in failed.items()))
        return dict(wheels=len(wheels), reused=reused, imports=imports)

    def import_check(self, name, modules, limit=120):
        run = self.command(name, [self.python, '-c', IMPORT_PROBE, *modules],
                           limit, log=f'{name}-imports')
        found = json_line(tail(osp.join(self.out, run['log']), 20000),
                          'IMPORTS')
        if found is None:
            raise Stop(
                'failed', f'the import check did not finish; see '
                f'{run["log"]}')
        return found

    def environment(self, limit):
        run = self.checked('environment', [self.python, '-c', ENV_PROBE],
                           limit)
        info = json_line(tail(osp.join(self.out, run['log']), 20000), 'ENV')
        if info is None:
            raise Stop('failed', f'no versions printed; see {run["log"]}')
        for key, cmd in (('nvidia_smi', [
                'nvidia-smi', '--query-gpu=name,'
                'driver_version,memory.total', '--format=csv,noheader'
        ]), ('nvcc', ['nvcc', '--version'])):
            try:
                done = subprocess.run(cmd, capture_output=True, text=True,
                                      timeout=30)
                lines = done.stdout.strip().splitlines()
                info[key] = lines[-1] if lines else done.stderr.strip()
            except (OSError, subprocess.TimeoutExpired) as err:
                info[key] = f'not available: {err}'
        self.report['environment'] = info
        if not self.dry and not info.get('cuda_available'):
            raise Stop('failed', 'torch sees no CUDA device')
        return info

    def make_standin(self):
        """mmcv's Python sources with the stand-in ops, in WORK/standin:
        from the wheelhouse's sdist, or in a dry run from the installed
        mmcv."""
        fresh = self.standin + '.new'
        shutil.rmtree(fresh, ignore_errors=True)
        target = osp.join(fresh, 'mmcv')
        if self.dry:
            done = subprocess.run([
                self.python, '-c', 'import importlib.util as u; '
                'print(u.find_spec("mmcv").submodule_search_locations[0])'
            ], capture_output=True, text=True)
            if done.returncode:
                raise Stop(
                    'failed', f'mmcv is not installed here: '
                    f'{done.stderr.strip()[-500:]}')
            shutil.copytree(
                done.stdout.strip(), target,
                ignore=shutil.ignore_patterns('*.so', '__pycache__', 'csrc'))
        else:
            sdist = self.mmcv_sdist()
            with tarfile.open(sdist) as tf:
                for member in tf.getmembers():
                    parts = member.name.split('/')
                    if (member.isfile() and member.name.endswith('.py')
                            and len(parts) > 2 and parts[1] == 'mmcv'
                            and 'csrc' not in parts):
                        path = osp.join(fresh, *parts[1:])
                        os.makedirs(osp.dirname(path), exist_ok=True)
                        with open(path, 'wb') as f:
                            f.write(tf.extractfile(member).read())
        shutil.copyfile(STANDIN_EXT, osp.join(target, '_ext.py'))
        shutil.rmtree(self.standin, ignore_errors=True)
        os.replace(fresh, self.standin)

    def mmcv_sdist(self):
        found = glob.glob(osp.join(self.wheelhouse, 'src', 'mmcv-*.tar.gz'))
        if len(found) != 1:
            raise Stop(
                'failed', f'expected one mmcv-*.tar.gz in '
                f'{self.wheelhouse}/src, found {len(found)}')
        return found[0]

    # -- the mmcv build -----------------------------------------------------

    def mmcv_paths(self):
        d = self.mmcv_dir
        return dict(src=osp.join(d, 'src'), dist=osp.join(d, 'dist'),
                    site=osp.join(d, 'site'), pid=osp.join(d, 'build.pid'),
                    rc=osp.join(d, 'build.rc'), log=osp.join(d, 'build.log'))

    def start_mmcv_build(self, limit):
        """Starts (or finds) the build; :meth:`settle_mmcv` finishes it."""
        p = self.mmcv_paths()
        if osp.exists(osp.join(p['site'], '.complete')):
            self.ops = 'built'
            for info in glob.glob(osp.join(p['site'], 'mmcv-*.dist-info')):
                self.report['environment']['mmcv'] = osp.basename(info).split(
                    '-')[1]
            return dict(state='done', reused='the installed build')
        if glob.glob(osp.join(p['dist'], 'mmcv-*.whl')):
            self.mmcv_build = dict(started=time.monotonic(), reused='wheel')
            return dict(state='running', reused='the built wheel')
        if osp.exists(p['pid']) and alive(int(open(p['pid']).read())):
            self.mmcv_build = dict(started=time.monotonic(),
                                   pid=int(open(p['pid']).read()))
            return dict(state='running', reused='a build still going')
        arch = self.args.cuda_arch
        if not arch:
            capability = self.report['environment'].get('capability')
            if not capability:
                raise Stop(
                    'failed', 'no CUDA device to build for (and no '
                    '--cuda-arch)')
            arch = '.'.join(map(str, capability))
        sdist = self.mmcv_sdist()
        name = osp.basename(sdist)[:-len('.tar.gz')]
        source = osp.join(p['src'], name)
        unpacked = osp.isdir(source)
        if not unpacked:  # never over an existing tree
            fresh = p['src'] + '.new'
            shutil.rmtree(fresh, ignore_errors=True)
            with tarfile.open(sdist) as tf:
                if hasattr(tarfile, 'data_filter'):  # no links out, no devices
                    tf.extractall(fresh, filter='data')
                else:
                    tf.extractall(fresh)
            os.makedirs(p['src'], exist_ok=True)
            os.replace(osp.join(fresh, name), source)
            shutil.rmtree(fresh, ignore_errors=True)
        if osp.exists(p['rc']):
            os.remove(p['rc'])
        pip = shlex.join([
            self.python, '-m', 'pip', 'wheel', '--no-deps', '--no-index',
            '--no-build-isolation', '--disable-pip-version-check', '-w',
            p['dist'], source
        ])
        script = (f'{pip}; echo $? > {shlex.quote(p["rc"])}.tmp && '
                  f'mv {shlex.quote(p["rc"])}.tmp {shlex.quote(p["rc"])}')
        env = self.env(
            dict(MMCV_WITH_OPS='1', FORCE_CUDA='1', TORCH_CUDA_ARCH_LIST=arch,
                 MAX_JOBS=str(len(self.build_cpus))))
        # Only the wheelhouse (its setuptools has pkg_resources) and torch.
        env['PYTHONPATH'] = self.site
        proc = launch(['sh', '-c', script], p['log'], env, source,
                      self.build_cpus, new_session=True)
        with open(p['pid'], 'w') as f:
            f.write(str(proc.pid))
        self.mmcv_build = dict(started=time.monotonic(), pid=proc.pid,
                               proc=proc)
        return dict(state='running', arch=arch, max_jobs=len(self.build_cpus),
                    sources='reused' if unpacked else 'unpacked')

    def settle_mmcv(self, wait_s):
        """Wait up to ``wait_s`` for the build; once it has ended, install
        its wheel and check the ops. Records the stage; True once settled
        (built or failed)."""
        if self.ops == 'built' or self.mmcv_build is None:
            return True
        p = self.mmcv_paths()
        build = self.mmcv_build
        end = time.monotonic() + wait_s
        while True:
            if osp.exists(p['rc']) or (build.get('reused') == 'wheel'):
                break
            if 'proc' in build:
                build['proc'].poll()  # reap it, so it is not a zombie
            if not alive(build['pid']):
                break
            if time.monotonic() >= end:
                return False
            time.sleep(5)
        self.mmcv_build = None
        fields = dict(build_seconds=round(time.monotonic() -
                                          build['started'], 1))
        if osp.exists(p['log']):
            shutil.copyfile(p['log'], osp.join(self.logs, 'mmcv-build.log'))
        rc = open(p['rc']).read().strip() if osp.exists(p['rc']) else None
        wheels = glob.glob(osp.join(p['dist'], 'mmcv-*.whl'))
        if not wheels or (rc is not None and rc != '0'):
            self.finish_stage(
                'mmcv-build', 'failed', fields,
                f'the build ended with exit {rc}; see '
                f'logs/mmcv-build.log:\n' + tail(p['log'], 1500))
            return True
        fresh = p['site'] + '.new'
        shutil.rmtree(fresh, ignore_errors=True)
        run = self.command('mmcv-build', [
            self.python, '-m', 'pip', 'install', '--no-index', '--no-deps',
            '--no-compile', '--disable-pip-version-check', '--target', fresh,
            wheels[0]
        ], 120, log='mmcv-install')
        if run['returncode']:
            self.finish_stage('mmcv-build', 'failed', fields,
                              f'installing {wheels[0]} failed')
            return True
        shutil.rmtree(p['site'], ignore_errors=True)
        os.replace(fresh, p['site'])
        self.ops = 'built'
        run = self.command('mmcv-build', [self.python, '-c', MMCV_OPS_PROBE],
                           120, log='mmcv-ops')
        if run['returncode']:
            self.ops = 'stand-in'
            self.finish_stage(
                'mmcv-build', 'failed', fields,
                'the built ops do not work; see '
                'logs/mmcv-ops.log')
            return True
        open(osp.join(p['site'], '.complete'), 'w').close()
        fields['wheel'] = osp.basename(wheels[0])
        self.report['environment']['mmcv'] = fields['wheel'].split('-')[1]
        self.finish_stage('mmcv-build', 'ok', fields)
        return True

    def finish_stage(self, name, status, fields, reason=None):
        stage = self.report['stages'].setdefault(name, {})
        result = dict(stage.get('result') or {}, **fields)
        stage.update(
            status=status, result=result,
            seconds=round(self.elapsed() - stage.get('started_s', 0), 1))
        if reason:
            stage['reason'] = reason
        self.save(pack=True)
        print(f'[suite] {name}: {status}', flush=True)

    def start_ext_build(self, limit):
        built = glob.glob(osp.join(ROOT, 'mmhgw', '_ext*.so'))
        sources = glob.glob(osp.join(ROOT, 'mmhgw', 'ops', 'csrc',
                                     '*')) + [osp.join(ROOT, 'setup.py')]
        if built and osp.getmtime(built[0]) >= max(map(osp.getmtime, sources)):
            return dict(state='done', reused=osp.basename(built[0]))
        lib = osp.join(self.work, 'ext', 'lib')
        shutil.rmtree(osp.join(self.work, 'ext'), ignore_errors=True)
        cmd = [
            self.python, 'setup.py', 'build_ext', '--build-lib', lib,
            '--build-temp',
            osp.join(self.work, 'ext', 'tmp')
        ]
        self.ext_proc = dict(
            proc=launch(cmd, osp.join(self.logs, 'mmhgw-ext.log'), self.env(),
                        ROOT, self.build_cpus), lib=lib,
            started=time.monotonic(), limit=limit)
        return dict(state='running')

    def settle_ext(self, wait_s):
        """Wait up to ``wait_s`` for the C++ kernels, then move them into
        the package at once (a process importing mmhgw meanwhile sees the
        whole file or none)."""
        job = self.ext_proc
        if job is None:
            return True
        left = min(wait_s, job['limit'] - (time.monotonic() - job['started']))
        try:
            job['proc'].wait(max(left, 0.1))
        except subprocess.TimeoutExpired:
            if left < wait_s:  # its own limit is reached
                wait(job['proc'], 0)
            else:
                return False
        self.ext_proc = None
        built = glob.glob(osp.join(job['lib'], 'mmhgw', '_ext*.so'))
        fields = dict(build_seconds=round(time.monotonic() -
                                          job['started'], 1))
        if job['proc'].returncode or not built:
            self.finish_stage(
                'mmhgw-ext', 'failed', fields,
                'see logs/mmhgw-ext.log (the CPU tests of '
                'the C++ kernels fall back or skip)')
            return True
        target = osp.join(ROOT, 'mmhgw', osp.basename(built[0]))
        shutil.copyfile(built[0], target + '.tmp')
        os.replace(target + '.tmp', target)
        self.finish_stage('mmhgw-ext', 'ok', fields)
        return True

    # -- measuring stages ---------------------------------------------------

    def make_data(self, limit):
        marker = osp.join(self.data, '.complete')
        scale = '0.05' if self.dry else '1'
        if osp.exists(marker) and open(marker).read() == scale:
            return dict(reused=True)
        self.checked('data', [
            self.python, 'tools/make_demo_data.py', '--out',
            osp.join(self.data, 'demo'), '--only', 'isic', 'coco', '--scale',
            scale
        ], limit)
        with open(marker, 'w') as f:
            f.write(scale)
        return dict(reused=False, scale=float(scale))

    def pytest(self, name, args, limit, cpus, extra_env=None):
        junit = osp.join(self.logs, f'{name}.xml')
        run = self.command(name, [
            self.python, '-m', 'pytest', *args, '-q', '-p', 'no:cacheprovider',
            '-rfE', f'--junitxml={junit}'
        ], limit, cpus=cpus, env=self.env(extra_env))
        if not osp.exists(junit):
            raise Stop(
                'timeout' if run['timed_out'] else 'failed',
                f'pytest wrote no report (exit {run["returncode"]}); '
                f'see {run["log"]}')
        summary = junit_summary(junit)
        if run['timed_out'] or summary['failures'] or summary['errors']:
            stage = self.report['stages'][name]
            stage['result'] = summary
            raise Stop(
                'timeout' if run['timed_out'] else 'failed',
                f'{summary["failures"]} failed, {summary["errors"]} '
                f'errors of {summary["tests"]}')
        return summary

    def test_cuda(self, limit):
        return self.pytest('test-cuda', ['tests/test_cuda.py'], limit,
                           self.timing_cpus)

    def bench(self, name, script, args, limit, env=None):
        out = osp.join(self.logs, f'{name}.json')
        self.checked(name, [
            self.python, script, '--device', self.device, '--no-write',
            '--json', out, *args
        ], limit, cpus=self.timing_cpus, env=env)
        with open(out) as f:
            return json.load(f)

    def tune_triton(self, limit):
        if self.dry:  # through the interpreter, at one location
            return self.bench('tune-triton', 'bench/tune_triton.py',
                              ['--feature-map', '1x1', '--rounds', '1'], limit,
                              env=self.env(dict(TRITON_INTERPRET='1')))
        return self.bench('tune-triton', 'bench/tune_triton.py', [], limit)

    def bench_op(self, limit):
        # The torch composition's GPU times are in the docs already: the
        # Triton kernels alone here.
        args = (['--feature-map', '3x4', '--repeats', '1']
                if self.dry else ['--batches', '1,2', '--backends', 'triton'])
        return self.bench('bench-op', 'bench/bench_op.py', args, limit)

    def bench_layer(self, limit):
        args = (['--cases', '32x1x4x4', '--repeats', '1'] if self.dry else [])
        return self.bench('bench-layer', 'bench/bench_layer.py', args, limit)

    def bench_mask_rcnn(self, limit):
        # One round (the models one after the other, as before rounds
        # existed): five fresh processes per model would not fit the
        # stage's time on a lent GPU.
        return self.bench('bench-mask-rcnn', 'bench/bench_models.py', [
            '--group', 'mask-rcnn', '--batch', '2', '--routings', 'hgw',
            '--rounds', '1'
        ], limit)

    def train(self, name, limit):
        kind, *configs = TRAINING[name]
        iters = (2 if self.dry else self.args.det_iters
                 if kind == 'det' else self.args.train_iters)
        amp = not self.dry
        runs, begin = {}, time.monotonic()
        for index, (label,
                    config) in enumerate(zip(('stock', 'hgwcaps'), configs)):
            # The first run may take half the time left, the second the rest.
            left = limit - (time.monotonic() - begin)
            share = left / (2 - index)
            work_dir = osp.join(self.work, 'runs', f'{name}-{label}')
            shutil.rmtree(work_dir, ignore_errors=True)
            cmd = ([
                self.python,
                osp.join(ROOT, 'tools', 'train.py'),
                osp.join(ROOT, config), '--work-dir', work_dir
            ] + (['--amp'] if amp else []) + ['--cfg-options'] +
                   training_options(kind, iters, self.dry))
            # The configs find the demo data under ./data/demo.
            run = self.command(name, cmd, share, cwd=self.work,
                               cpus=self.timing_cpus, log=f'{name}-{label}')
            run.update(config=config, **training_summary(work_dir))
            if run['scalars']:
                shutil.copyfile(
                    run['scalars'],
                    osp.join(self.logs, f'{name}-{label}.scalars.json'))
                run['scalars'] = f'logs/{name}-{label}.scalars.json'
            runs[label] = run
        result = dict(iters=iters, amp=amp, runs=runs,
                      log_interval=training_log_interval(iters, self.dry))
        stock, hgw = runs['stock'], runs['hgwcaps']
        if stock.get('iter_time_s') and hgw.get('iter_time_s'):
            result['time_ratio'] = hgw['iter_time_s'] / stock['iter_time_s']
        bad = [
            f'{label}: ' + ('stopped at its time limit'
                            if r['timed_out'] else f'exit {r["returncode"]}'
                            if r['returncode'] else 'non-finite loss')
            for label, r in runs.items()
            if r['timed_out'] or r['returncode'] or not r['losses_finite']
        ]
        if bad:
            self.report['stages'][name]['result'] = result
            raise Stop(
                'timeout' if any(r['timed_out']
                                 for r in runs.values()) else 'failed',
                '; '.join(bad))
        return result

    def study(self, limit):
        runs = osp.join(self.work, 'study', 'runs')
        if self.args.study_runs:
            unpack_study_runs(self.args.study_runs, runs)
        cmd = [
            self.python, 'tools/analysis/ablation_study.py',
            *shlex.split(self.args.study_args), '--jobs',
            str(self.args.study_jobs), '--work-dir', runs, '--out',
            osp.join(self.logs, 'study.md'), '--image',
            osp.join(self.logs, 'study.png')
        ]
        if self.dry:  # the last value of an option wins
            cmd += ['--iters', '2', '--seeds', '0']
        # One thread a run: the runs share the cores as they share the GPU.
        run = self.command('study', cmd, limit,
                           env=self.env(dict(OMP_NUM_THREADS='1')))
        finished = self.pack_study(runs)
        result = dict(finished=finished,
                      report=osp.exists(osp.join(self.logs, 'study.md')))
        if run['timed_out'] or run['returncode']:
            self.report['stages']['study']['result'] = result
            raise Stop(
                'timeout' if run['timed_out'] else 'failed',
                f'{len(finished)} runs finished; see {run["log"]}:\n' +
                tail(osp.join(self.out, run['log']), 1500))
        return result

    def pack_study(self, runs):
        """Every run under ``runs`` into logs/study-runs.tar.gz,
        checkpoints left out: the finished ones (with a ``result.json``)
        and the logs of those that failed or were cut short. The names
        (variant/seed) of the finished runs."""
        started = sorted(
            osp.dirname(p) for p in glob.glob(
                osp.join(runs, '**', 'train.out'), recursive=True))
        archive = osp.join(self.logs, 'study-runs.tar.gz')
        with tarfile.open(archive + '.tmp', 'w:gz') as tf:
            for run in started:
                for path in glob.glob(osp.join(run, '**', '*'),
                                      recursive=True):
                    if osp.isfile(path) and not path.endswith('.pth'):
                        tf.add(path, osp.relpath(path, runs))
        os.replace(archive + '.tmp', archive)
        return [
            osp.relpath(run, runs) for run in started
            if osp.exists(osp.join(run, 'result.json'))
        ]

    def start_tests(self, limit):
        """The whole suite in the background on the build's cores (the
        build is over), beside the timed stages."""
        args = list(self.test_paths)
        workers = self.args.test_workers
        if workers is None:
            workers = len(self.build_cpus) // 2
        probe = subprocess.run(
            [self.python, '-c', 'import xdist, '
             'pytest_timeout'], env=self.env(), capture_output=True)
        if probe.returncode:
            workers = 0
        else:
            args += ['--timeout', '300']
        if workers > 1:
            args += ['-n', str(workers), '--dist', 'loadfile']
        else:
            workers = 0
        junit = osp.join(self.logs, 'tests.xml')
        cmd = [
            self.python, '-m', 'pytest', *args, '-q', '-p', 'no:cacheprovider',
            '-rfE', f'--junitxml={junit}'
        ]
        log = osp.join(self.logs, 'tests.log')
        env = self.env(dict(OMP_NUM_THREADS='2'))
        self.tests_job = dict(
            proc=launch(cmd, log, env, ROOT,
                        self.build_cpus), started=time.monotonic(),
            limit=limit, junit=junit, command=shlex.join(cmd))
        return dict(state='running', xdist_workers=workers or None)

    def settle_tests(self):
        job = self.tests_job
        if job is None:
            return
        self.tests_job = None
        left = min(job['limit'] - (time.monotonic() - job['started']),
                   self.left() - RESERVE_S)
        returncode, timed_out = wait(job['proc'], left)
        fields = dict(command=job['command'], returncode=returncode,
                      timed_out=timed_out)
        if not osp.exists(job['junit']):
            self.finish_stage(
                'tests', 'timeout' if timed_out else 'failed', fields,
                'pytest wrote no report; see '
                'logs/tests.log:\n' +
                tail(osp.join(self.logs, 'tests.log'), 1500))
            return
        fields.update(junit_summary(job['junit']))
        bad = timed_out or fields['failures'] or fields['errors']
        self.finish_stage(
            'tests', ('timeout' if timed_out else 'failed') if bad else 'ok',
            fields, f'{fields["failures"]} failed, {fields["errors"]} '
            f'errors of {fields["tests"]}' if bad else None)

    def poll_background(self):
        """Between stages: settle what has finished, and start the whole
        test suite once mmcv is built and the C++ kernels are ready."""
        self.settle_mmcv(0)
        if (self.ops == 'built' and self.tests_job is None
                and 'tests' not in self.report['stages']):
            if not self.settle_ext(0):
                return
            self.stage('tests', self.start_tests)

    # -- the run ------------------------------------------------------------

    def run(self):
        os.makedirs(self.logs, exist_ok=True)
        os.makedirs(self.work, exist_ok=True)
        self.save()
        self.stage('install', self.install)
        try:
            self.make_standin()
        except Exception as err:  # the stages before the build then fail
            self.report['standin_error'] = str(err)[-2000:]
        self.stage('environment', self.environment)
        self.stage('mmcv-build', self.start_mmcv_build)
        self.stage('mmhgw-ext', self.start_ext_build)
        steps = dict(
            data=self.make_data, **{
                'test-cuda': self.test_cuda, 'tune-triton': self.tune_triton,
                'bench-op': self.bench_op, 'bench-layer': self.bench_layer,
                'train-unet': lambda t: self.train('train-unet', t),
                'train-deeplabv3plus': lambda t: self.train(
                    'train-deeplabv3plus', t),
                'bench-mask-rcnn': self.bench_mask_rcnn,
                'train-mask-rcnn': lambda t: self.train('train-mask-rcnn', t),
                'study': self.study
            })
        for name in FOREGROUND_BEFORE_OPS:
            self.stage(name, steps[name])
            self.poll_background()
        if self.dry:
            self.ops = 'built'  # this environment's own mmcv from here on
        elif self.mmcv_build is not None:
            print('[suite] waiting for the mmcv build', flush=True)
            self.settle_mmcv(max(self.left() - RESERVE_S - MIN_START_S, 0))
        self.poll_background()
        for name in FOREGROUND_AFTER_OPS:
            if self.ops != 'built' and not self.skip_reason(name):
                self.record(
                    name, status='skipped',
                    reason='mmcv ops not built: ' + self.report['stages'].get(
                        'mmcv-build', {}).get('status', 'not run'))
                continue
            self.stage(name, steps[name])
            self.poll_background()
        self.settle_tests()
        if 'tests' not in self.report['stages']:
            reason = self.skip_reason('tests') or (
                'mmcv ops not built' if self.ops != 'built' else
                'the C++ kernels were not ready in time')
            self.record('tests', status='skipped', reason=reason)
        if self.ext_proc is not None:
            wait(self.ext_proc['proc'], 0)
        for name in ('mmcv-build', 'mmhgw-ext'):
            stage = self.report['stages'].get(name, {})
            if stage.get('status') == 'running':
                self.finish_stage(
                    name, 'timeout', {},
                    'still running at the end of the budget' +
                    (' (the mmcv build goes on in its own '
                     'session: a next run on this machine '
                     'waits for it)' if name == 'mmcv-build' else ''))
        self.report['finished'] = datetime.datetime.now().isoformat(
            timespec='seconds')
        self.save(pack=True)
        statuses = {n: s['status'] for n, s in self.report['stages'].items()}
        width = max(map(len, statuses))
        print('\n'.join(f'{n:<{width}}  {s}' for n, s in statuses.items()))
        print(f'results: {osp.join(self.out, "gpu_suite.json")}')
        return statuses


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('out', help='folder for gpu_suite.json and logs/')
    parser.add_argument(
        '--wheelhouse', default=osp.join(ROOT, 'wheelhouse'),
        help='made by tools/gpu/wheelhouse.py (default: '
        'wheelhouse/ in the repository)')
    parser.add_argument(
        '--work', help=f'machine-local folder for the '
        f'install, the builds, the data and the runs '
        f'(default: {DEFAULT_WORK}; dry run: OUT/work)')
    parser.add_argument('--budget', type=float, default=540,
                        help='seconds for the whole run (default 540)')
    parser.add_argument(
        '--stages', help='comma-separated stages to run '
        '(with what they need); default: all')
    parser.add_argument('--skip', help='comma-separated stages not to run')
    parser.add_argument('--train-iters', type=int, default=300,
                        help='iterations of each UNet and DeepLabV3+ run')
    parser.add_argument('--det-iters', type=int, default=100,
                        help='iterations of each Mask R-CNN run')
    parser.add_argument(
        '--timing-cpus', type=int, default=3,
        help='cores kept for the timed stages (the builds '
        'and the tests get the rest)')
    parser.add_argument(
        '--test-workers', type=int,
        help='pytest-xdist workers of the whole suite '
        '(default: half the build\'s cores; 0: none)')
    parser.add_argument(
        '--cuda-arch', help='TORCH_CUDA_ARCH_LIST for mmcv '
        '(default: the device\'s, e.g. 9.0)')
    parser.add_argument(
        '--archive', help='also pack OUT into this .tar.gz '
        'after every stage')
    parser.add_argument(
        '--dry-run', action='store_true',
        help='the CPU-side stages, small and short, in this '
        'environment')
    parser.add_argument(
        '--study-args', help='options of tools/analysis/ablation_study.py '
        'for the study stage, as one string (its --work-dir, --out, '
        '--image and --jobs are the suite\'s)')
    parser.add_argument('--study-jobs', type=int, default=8,
                        help='runs of the study trained at a time')
    parser.add_argument(
        '--study-runs', metavar='FILE',
        help='a study-runs.tar.gz of an earlier run, unpacked into the '
        'study\'s folder first: its finished runs are reused')
    args = parser.parse_args(argv)
    if args.study_runs and not args.study_args:
        parser.error('--study-runs needs --study-args (the study to reuse '
                     'its runs in)')
    if args.study_runs and not osp.isfile(args.study_runs):
        parser.error(f'--study-runs {args.study_runs}: no such file')
    if args.study_args:
        try:
            words = shlex.split(args.study_args)
        except ValueError as err:
            parser.error(f'--study-args {args.study_args!r}: {err}')
        owned = {'--work-dir', '--out', '--image', '--jobs'
                 } & {a.split('=', 1)[0]
                      for a in words}
        if owned:
            parser.error(f'--study-args: {", ".join(sorted(owned))} '
                         f'belong to the suite')
    if args.budget <= 0:
        parser.error('--budget must be positive')
    for key in ('train_iters', 'det_iters', 'timing_cpus', 'study_jobs'):
        if getattr(args, key) < 1:
            parser.error(f'--{key.replace("_", "-")} must be >= 1')
    return args


def main(argv=None):
    suite = Suite(parse_args(argv))
    statuses = suite.run()
    failed = [n for n, s in statuses.items() if s not in ('ok', 'skipped')]
    sys.exit(1 if failed else 0)


if __name__ == '__main__':
    main()
