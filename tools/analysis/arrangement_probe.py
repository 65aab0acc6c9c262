"""Can the transport plan tell how parts are arranged? A probe on the T-or-L
patches (:func:`mmhgw.datasets.synthetic.make_arrangement_patches`: the same
two bars joined as a T or an L, so that only their arrangement decides the
label).

A small classifier is trained from scratch per variant and seed: three 3x3
convolutions (the last two of stride 2) to a map of a quarter of the patch,
then the layer under test, BN, ReLU, global mean pooling and a linear
classifier. The layer under test is a stock 3x3 convolution (``stock``) or an
HGWCaps layer of as many channels, routing by the HGW plan (``hgw``) or by
the uniform plan ``p q^T`` (``uniform``), with its regulariser E and beta
ramped as in training (HGWBetaWarmupHook's schedule). With
``--capsule-layers 2`` or ``3`` the capsule variants also route the third,
and the second, 3x3 layer (a capsule network after one or two
convolutions, as the paper's classifiers are); ``stock`` is unchanged.
Every variant sees the same training patches (data seed 0) and test patches
(data seed 1); the seed sets the initialisation and the batch order. The
report: test accuracy per variant (mean, std, per seed) and the paired
differences with their 95% interval (:mod:`mmhgw.analysis.paired`), as
trained and with the BN running statistics recomputed as plain averages
over the training patches under the final weights.

Rotation (the paper's robustness claim): ``--train-angles`` narrows the
objects' rotation in training (and in the test set) to a range, and
``--test-rotations`` scores each model as trained on the same test patches
with every object turned by each offset more; the report adds accuracy per
offset and the paired differences of the drop from offset 0.

    python tools/analysis/arrangement_probe.py [--variants stock hgw uniform]
        [--seeds 0 1 2 3 4] [--steps 1000] [--batch 32] [--train 4000]
        [--test 2000] [--size 32] [--channels 64] [--types 16]
        [--layer-cfg key=value ...] [--capsule-layers 1]
        [--train-angles 0 360]
        [--test-rotations 0 45 90] [--test-ranges 0 30 180]
        [--image FILE] [--threads 1] [--json FILE]
    python tools/analysis/arrangement_probe.py --pool A.json B.json
        [--image FILE]
    python tools/analysis/arrangement_probe.py --grid A.json B.json ...
        [--image FILE]

The paper's train-and-test grid: ``--test-ranges`` also scores each model
on the test patches drawn with their rotation in ``[-W, W]`` for each
half-width ``W``; run once per training range ``--train-angles -W W``
(each with the same ``--test-ranges``, which hold ``W``), then ``--grid``
reports accuracy per training and test range, and per pair of variants the
paired differences of the mean over the grid and of the drop from a
model's own range to the wider test ranges.

``--pool`` reports the runs of earlier ``--json`` files together (seed
ranges run in separate processes), without training; their settings must
agree.

``--layer-cfg`` sets HGWCaps arguments (e.g. ``temperature=0.03``) for
both capsule variants.
"""
import argparse
import copy
import json
import math
import statistics
import time
from types import SimpleNamespace

import numpy as np
import torch
import torch.nn as nn

from mmhgw.analysis.paired import fmt_interval, mean_std
from mmhgw.config_utils import check_unique
from mmhgw.datasets.synthetic import angle_range, make_arrangement_patches

VARIANTS = ('stock', 'hgw', 'uniform')
#: Iterations of the beta ramp, as a share of the steps.
WARMUP_SHARE = 0.25

#: Strides of the probe's four 3x3 layers (each followed by BN and ReLU).
STRIDES = (1, 2, 2, 1)
#: The most capsule layers: all but the first, which sees the pixels.
MAX_CAPSULE_LAYERS = len(STRIDES) - 1


def probe_network(variant: str, channels: int = 64, types: int = 16,
                  layer_cfg: dict = None,
                  capsule_layers: int = 1) -> nn.Sequential:
    """The probe classifier: four 3x3 layers (32x32 patches to 8x8 maps),
    global pooling and a linear head. For the capsule variants the last
    ``capsule_layers`` of them (1 to 3: the first always sees the pixels)
    are HGWCaps layers routed by ``variant``; ``stock`` keeps convolutions
    throughout."""
    if not 1 <= capsule_layers <= MAX_CAPSULE_LAYERS:
        raise ValueError(f'capsule_layers must be 1 to {MAX_CAPSULE_LAYERS}, '
                         f'got {capsule_layers}')
    widths = (3, channels // 2, channels, channels, channels)

    def layer(index):
        cin, cout, stride = widths[index], widths[index + 1], STRIDES[index]
        if variant == 'stock' or index < len(STRIDES) - capsule_layers:
            return nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        from mmhgw.models import HGWCaps
        return HGWCaps(cin, cout, 3, stride, padding=1, in_types=types,
                       out_types=types, routing=variant, **(layer_cfg or {}))

    # The last layer is drawn first, then the others in order: a seed
    # gives the initial weights it gave before the count was a knob, so the
    # recorded screens replay.
    last = len(STRIDES) - 1
    layers = {index: layer(index) for index in (last, *range(last))}
    modules = []
    for index in range(len(STRIDES)):
        modules += [
            layers[index],
            nn.BatchNorm2d(layers[index].out_channels),
            nn.ReLU(inplace=True)
        ]
    return nn.Sequential(*modules, nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                         nn.Linear(channels, 2))


def as_tensor(images: np.ndarray) -> torch.Tensor:
    """uint8 [n, H, W, 3] to float [n, 3, H, W], each channel scaled to
    about zero mean and unit spread."""
    x = torch.from_numpy(images).permute(0, 3, 1, 2).float()
    return (x - 127.5) / 64.0


def accuracy(model, x, y, batch=256) -> float:
    model.eval()
    with torch.no_grad():
        hits = sum((model(x[i:i + batch]).argmax(1) == y[i:i + batch]).sum()
                   for i in range(0, len(x), batch))
    return float(hits) / len(x)


def train_probe(variant, seed, data, steps, batch, network: dict, rotated=None,
                ranged=None) -> dict:
    """Train one probe (``network``: :func:`probe_network`'s arguments
    but the variant); its test accuracy (also with its BN statistics
    recomputed over the training patches, ``recompute_bn_statistics``),
    last losses and seconds; with ``rotated`` (``{offset: (x, y)}``, the
    test set turned by each offset), ``rotated_accuracy`` per offset; with
    ``ranged`` (``{half_width: (x, y)}``, test sets drawn at rotations in
    ``[-W, W]``), ``range_accuracy`` per half-width."""
    from mmhgw.engine.hooks import HGWBetaWarmupHook, recompute_bn_statistics
    (x_train, y_train), (x_test, y_test) = data
    torch.manual_seed(seed)
    model = probe_network(variant, **network)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    ramp = HGWBetaWarmupHook(warmup_iters=int(steps * WARMUP_SHARE),
                             log_stats=False)
    order = torch.Generator().manual_seed(seed)
    losses, start, perm, at = [], time.perf_counter(), None, len(x_train)
    for step in range(steps):
        if at + batch > len(x_train):
            perm, at = torch.randperm(len(x_train), generator=order), 0
        idx = perm[at:at + batch]
        at += batch
        model.train()
        ramp.before_train_iter(SimpleNamespace(model=model, iter=step), step)
        loss = nn.functional.cross_entropy(model(x_train[idx]), y_train[idx])
        if not torch.isfinite(loss):
            raise FloatingPointError(
                f'{variant} seed {seed}: the loss is {loss.item()} at step '
                f'{step}')
        optimizer.zero_grad()
        loss.backward()  # E's gradient joins here (attach_aux_loss)
        optimizer.step()
        losses.append(loss.item())
    tail = losses[-max(1, steps // 10):]
    recomputed = copy.deepcopy(model)
    # Plain averages over every training patch in training-sized batches.
    recompute_bn_statistics(recomputed, [
        x_train[i:i + batch] for i in range(0,
                                            len(x_train) - batch + 1, batch)
    ],
                            len(x_train) // batch, forward=lambda m, x: m(x))
    return dict(
        variant=variant, seed=seed,
        test_accuracy=accuracy(model, x_test, y_test),
        test_accuracy_recomputed_bn=accuracy(recomputed, x_test, y_test),
        train_accuracy=accuracy(model, x_train, y_train), rotated_accuracy={
            offset_key(offset): accuracy(model, x, y)
            for offset, (x, y) in (rotated or {}).items()
        }, range_accuracy={
            offset_key(width): accuracy(model, x, y)
            for width, (x, y) in (ranged or {}).items()
        }, final_loss=statistics.fmean(tail),
        seconds=time.perf_counter() - start)


def report(runs, variants, key='test_accuracy') -> str:
    """Markdown: accuracy per variant, then each capsule variant's paired
    differences to the others; ``key``: the runs' test accuracy as trained
    or with BN recomputed (``test_accuracy_recomputed_bn``)."""
    by = {
        v: {r['seed']: r
            for r in runs if r['variant'] == v}
        for v in variants
    }
    lines = [
        '| variant | test accuracy (%) | per seed | '
        'train accuracy, as trained (%) | s / run |', '|---|---|---|---|---|'
    ]
    for v in variants:
        acc = [100 * r[key] for r in by[v].values()]
        if not acc:
            continue
        mean, std = mean_std(acc)
        train = statistics.fmean(100 * r['train_accuracy']
                                 for r in by[v].values())
        sec = statistics.fmean(r['seconds'] for r in by[v].values())
        per = ', '.join(f'{a:.1f}' for a in acc)
        lines.append(f'| {v} | {mean:.2f} ± {std:.2f} | '
                     f'{per} | {train:.1f} | {sec:.0f} |')
    for a, b in (('hgw', 'uniform'), ('hgw', 'stock'), ('uniform', 'stock')):
        seeds = sorted(set(by.get(a, {})) & set(by.get(b, {})))
        if not seeds:
            continue
        diffs = [100 * (by[a][s][key] - by[b][s][key]) for s in seeds]
        per = ', '.join(f'{d:+.1f}' for d in diffs)
        lines.append(f'| {a} minus {b} | {fmt_interval(diffs)} | {per} | | |')
    return '\n'.join(lines)


def offset_key(offset: float) -> str:
    """The JSON key of a rotation offset in degrees (``90``, ``22.5``)."""
    return f'{offset:g}'


def accuracy_at(run: dict, offset: float) -> float:
    """A run's test accuracy (%) with the objects turned by ``offset``
    degrees more (0: the plain test set)."""
    if offset == 0:
        return 100 * run['test_accuracy']
    return 100 * run['rotated_accuracy'][offset_key(offset)]


def plot_rotation(runs, variants, offsets, path: str):
    """Chart of test accuracy against the rotation offset, one line per
    variant (mean and one std over seeds), as trained."""
    from mmhgw.analysis.plots import plot_sweep
    offsets = [0] + [o for o in offsets if o != 0]
    stats = {}
    for v in variants:
        mine = [r for r in runs if r['variant'] == v]
        if not mine:
            continue
        stats[v] = {}
        for o in offsets:
            mean, std = mean_std([accuracy_at(r, o) for r in mine])
            stats[v][o] = dict(mean=mean, std=std)
    plot_sweep(stats, 'rotation added to the training angles (degrees)',
               'test accuracy (%)', path)


def rotation_report(runs, variants, offsets) -> str:
    """Markdown: test accuracy per variant at each rotation offset (degrees;
    offset 0 is the plain test set) and over the non-zero offsets, mean ±
    std over seeds; then, per pair of variants, the paired difference of
    their drops from offset 0 (``acc(0) - acc(r)``, seed by seed): below
    zero, the first variant loses less to the rotation."""
    offsets = [o for o in offsets if o != 0]

    def turned(run):  # the mean over the non-zero offsets
        return statistics.fmean(accuracy_at(run, o) for o in offsets)

    columns = [(f'{o:g}°', lambda r, o=o: accuracy_at(r, o))
               for o in [0] + offsets]
    columns.append(('mean of the turned', turned))
    by = {
        v: {r['seed']: r
            for r in runs if r['variant'] == v}
        for v in variants
    }
    lines = [
        '| variant | ' + ' | '.join(name for name, _ in columns) + ' |',
        '|---|' + '---|' * len(columns)
    ]
    for v in variants:
        if not by[v]:
            continue
        cells = []
        for _, value in columns:
            mean, std = mean_std([value(r) for r in by[v].values()])
            cells.append(f'{mean:.1f} ± {std:.1f}')
        lines.append(f'| {v} | ' + ' | '.join(cells) + ' |')
    for a, b in (('hgw', 'uniform'), ('hgw', 'stock'), ('uniform', 'stock')):
        seeds = sorted(set(by.get(a, {})) & set(by.get(b, {})))
        if not seeds:
            continue
        cells = ['']  # no drop at offset 0
        for _, value in columns[1:]:
            drops = [(accuracy_at(by[a][s], 0) - value(by[a][s])) -
                     (accuracy_at(by[b][s], 0) - value(by[b][s]))
                     for s in seeds]
            cells.append(fmt_interval(drops))
        lines.append(f'| drop, {a} minus {b} | ' + ' | '.join(cells) + ' |')
    return '\n'.join(lines)


#: Options that may differ between the files of one pooled report.
PER_PROCESS = ('seeds', 'variants', 'threads', 'json', 'pool', 'image')


def load_run_file(path, defaults=None, option='--pool'):
    """One ``--json`` file: ``(settings, runs)``, its settings without
    :data:`PER_PROCESS`; an option the file does not record (written before
    the option existed) counts as its value in ``defaults``. A file that is
    no run file of this tool is refused, named under ``option``."""
    try:
        with open(path) as f:
            saved = json.load(f)
        settings = {
            k: v
            for k, v in {**(defaults or {}), **saved['args']}.items()
            if k not in PER_PROCESS
        }
        return settings, list(saved['runs'])
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise ValueError(f'{option}: {path} is not a run file of this '
                         f'tool ({err})') from None


def differing(these: dict, those: dict) -> list:
    """The settings whose values differ between two files, sorted."""
    return sorted(k for k in set(these) | set(those)
                  if these.get(k) != those.get(k))


def pool_files(files, option='--pool'):
    """The runs of loaded files (``[(path, settings, runs)]``, as
    :func:`load_run_file` gives) and their shared settings, for one report.
    Files whose settings differ, or that hold the same variant and seed
    twice, are refused: pooling them would mix two experiments. ``option``
    names the command line's option in the messages."""
    runs, settings, seen = [], None, {}
    for path, these, file_runs in files:
        if settings is None:
            settings, first = these, path
        elif these != settings:
            raise ValueError(f'{option}: {path} and {first} differ in '
                             f'{differing(these, settings)}; only runs of '
                             f'one setting pool')
        for run in file_runs:
            key = (run['variant'], run['seed'])
            if key in seen:
                raise ValueError(f'{option}: {key[0]} seed {key[1]} is in '
                                 f'both {seen[key]} and {path}')
            seen[key] = path
            runs.append(run)
    return runs, settings


def pooled_runs(paths, defaults=None):
    """The runs of several ``--json`` files and their shared settings, for
    one report (:func:`load_run_file`, :func:`pool_files`)."""
    return pool_files([(path, *load_run_file(path, defaults))
                       for path in paths])


def range_accuracy(run: dict, width: float) -> float:
    """A run's test accuracy (%) on the test patches drawn at rotations in
    ``[-width, width]`` degrees (``--test-ranges``)."""
    return 100 * run['range_accuracy'][offset_key(width)]


def grid_runs(paths, defaults=None):
    """The runs of ``--json`` files for the train-and-test grid, by
    training half-width: ``({W: runs}, test_widths)``. Each file trained at
    a symmetric range ``[-W, W]`` and was scored on the same
    ``--test-ranges``, which hold ``W``; the files of one ``W`` pool as
    :func:`pool_files` does. Anything else is refused, naming the file."""
    groups = {}
    for path in paths:
        settings, runs = load_run_file(path, defaults, '--grid')
        try:
            low, high = settings['train_angles']
        except (TypeError, ValueError):
            raise ValueError(
                f'--grid: {path} is not a run file of this tool '
                f'(train_angles {settings["train_angles"]!r})') from None
        if low != -high:
            raise ValueError(f'--grid: {path} trained at [{low:g}, {high:g}] '
                             f'degrees; the grid trains at ranges [-W, W]')
        groups.setdefault(high, []).append((path, settings, runs))
    runs, shared = {}, None
    for width, files in sorted(groups.items()):
        runs[width], settings = pool_files(files, '--grid')
        settings = {k: v for k, v in settings.items() if k != 'train_angles'}
        tests = settings.get('test_ranges') or []
        if width not in tests:
            raise ValueError(f'--grid: {files[0][0]} trained at [-{width:g}, '
                             f'{width:g}] degrees but was not scored there '
                             f'(--test-ranges {tests})')
        if shared is None:
            shared, first = settings, files[0][0]
        elif settings != shared:
            raise ValueError(f'--grid: {files[0][0]} and {first} differ in '
                             f'{differing(settings, shared)}; a grid varies '
                             f'the training range only')
    return runs, sorted(set(shared['test_ranges']))


GRID_PAIRS = (('hgw', 'uniform'), ('hgw', 'stock'), ('uniform', 'stock'))


def row_drop(run: dict, width: float, tests) -> float | None:
    """One run's mean drop from its own training range ``[-width, width]``
    to each wider test range: ``mean(acc(W, W) - acc(W, W'))`` over the
    ``W'`` in ``tests`` above ``W``; None when none is wider."""
    wider = [test for test in tests if test > width]
    if not wider:
        return None
    own = range_accuracy(run, width)
    return statistics.fmean(own - range_accuracy(run, t) for t in wider)


def grid_scores(run_of_width: dict, tests) -> tuple:
    """One seed's two grid scores from its run at each training half-width
    (``{W: run}``): the mean accuracy over every cell, and the mean drop
    from a model's own range to each wider test range (``acc(W, W) -
    acc(W, W')`` for ``W' > W``; None when no test range is wider)."""
    cells, drops = [], []
    for width, run in run_of_width.items():
        own = range_accuracy(run, width)
        for test in tests:
            cells.append(range_accuracy(run, test))
            if test > width:
                drops.append(own - range_accuracy(run, test))
    return (statistics.fmean(cells),
            statistics.fmean(drops) if drops else None)


def grid_report(runs_by_width: dict, tests, variants) -> str:
    """Markdown: test accuracy per variant, training range and test range
    (mean ± std over seeds); then per variant and per pair of variants the
    two scores of :func:`grid_scores`, the pairs' as paired differences
    over the seeds run at every training range by both; last, each pair's
    :func:`row_drop` per training range, paired over the seeds run there
    by both."""
    widths = sorted(runs_by_width)
    by = {
        (v, w): {r['seed']: r
                 for r in runs_by_width[w] if r['variant'] == v}
        for v in variants
        for w in widths
    }
    lines = [
        '| variant, trained at | ' + ' | '.join(f'tested ±{t:g}°'
                                                for t in tests) + ' |',
        '|---|' + '---|' * len(tests)
    ]
    for v in variants:
        for w in widths:
            if not by[v, w]:
                continue
            cells = []
            for t in tests:
                mean, std = mean_std(
                    [range_accuracy(r, t) for r in by[v, w].values()])
                cells.append(f'{mean:.1f} ± {std:.1f}')
            lines.append(f'| {v}, ±{w:g}° | ' + ' | '.join(cells) + ' |')

    scores = {  # per variant, the seeds run at every training range
        v: {
            seed: grid_scores({w: by[v, w][seed]
                               for w in widths}, tests)
            for seed in set.intersection(*(set(by[v, w]) for w in widths))
        }
        for v in variants
    }

    lines += [
        '', '| over the seeds run at every training range | mean over the '
        'grid (%) | drop to the wider test ranges (points) | seeds |',
        '|---|---|---|---|'
    ]
    for v in variants:
        seeds = sorted(scores[v])
        if not seeds:
            continue
        columns = list(zip(*(scores[v][s] for s in seeds)))
        cells = []
        for values in columns:
            mean, std = mean_std(values)
            cells.append('n/a' if mean is None else f'{mean:.1f} ± {std:.1f}')
        lines.append(f'| {v} | ' + ' | '.join(cells) + f' | {len(seeds)} |')
    pairs_run = [(a, b) for a, b in GRID_PAIRS
                 if a in variants and b in variants]
    for a, b in pairs_run:
        seeds = sorted(set(scores[a]) & set(scores[b]))
        if not seeds:
            continue
        pairs = [(scores[a][s], scores[b][s]) for s in seeds]
        cells = [
            fmt_interval([x[i] - y[i] for x, y in pairs])
            if pairs[0][0][i] is not None else 'n/a' for i in (0, 1)
        ]
        lines.append(f'| {a} minus {b} | ' + ' | '.join(cells) +
                     f' | {len(seeds)} |')

    # The same drop row by row: where in the grid a pair's difference lies.
    rows = [w for w in widths if any(t > w for t in tests)]
    if rows and pairs_run:
        lines += [
            '', '| drop to the wider test ranges by training range, paired '
            'by seed (points) | ' + ' | '.join(f'trained ±{w:g}°'
                                               for w in rows) + ' |',
            '|---|' + '---|' * len(rows)
        ]
        for a, b in pairs_run:
            cells = []
            for w in rows:
                seeds = sorted(set(by[a, w]) & set(by[b, w]))
                cells.append(
                    fmt_interval([
                        row_drop(by[a, w][s], w, tests) -
                        row_drop(by[b, w][s], w, tests) for s in seeds
                    ]))
            lines.append(f'| {a} minus {b} | ' + ' | '.join(cells) + ' |')
    return '\n'.join(lines)


def plot_grid(runs_by_width: dict, tests, variants, path: str):
    """Chart of each variant's mean accuracy over the test ranges against
    its training range (mean and one std over seeds)."""
    from mmhgw.analysis.plots import plot_sweep
    stats = {}
    for v in variants:
        stats[v] = {}
        for w, runs in sorted(runs_by_width.items()):
            mine = [r for r in runs if r['variant'] == v]
            if mine:
                mean, std = mean_std([
                    statistics.fmean(range_accuracy(r, t) for t in tests)
                    for r in mine
                ])
                stats[v][w] = dict(mean=mean, std=std)
    plot_sweep({v: s
                for v, s in stats.items() if s}, 'training range ±W (degrees)',
               'accuracy, mean over the test ranges (%)', path)


def print_reports(runs, variants, rotations, image=None):
    """The reports of :func:`main`: as trained, with BN recomputed, and
    under rotation when ``rotations`` holds non-zero offsets (charted to
    ``image`` if given)."""
    print(report(runs, variants))
    print('\nWith BN statistics recomputed over the training patches:\n')
    print(report(runs, variants, 'test_accuracy_recomputed_bn'))
    if any(o != 0 for o in rotations):
        print('\nUnder rotation (as trained):\n')
        print(rotation_report(runs, variants, rotations))
        if image:
            plot_rotation(runs, variants, rotations, image)


def network_args(args) -> dict:
    """:func:`probe_network`'s arguments from the command line's."""
    return dict(channels=args.channels, types=args.types,
                layer_cfg=args.layer_cfg, capsule_layers=args.capsule_layers)


def build_parser() -> argparse.ArgumentParser:
    from mmengine.config import DictAction
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--variants', nargs='+', default=list(VARIANTS),
                        choices=VARIANTS)
    parser.add_argument('--seeds', nargs='+', type=int, default=[0, 1, 2])
    parser.add_argument('--steps', type=int, default=1000)
    parser.add_argument('--batch', type=int, default=32)
    parser.add_argument('--train', type=int, default=4000,
                        help='training patches')
    parser.add_argument('--test', type=int, default=2000, help='test patches')
    parser.add_argument('--size', type=int, default=32,
                        help='patch side in pixels')
    parser.add_argument('--channels', type=int, default=64)
    parser.add_argument(
        '--types', type=int, default=16,
        help="capsule types (in and out) of the HGWCaps "
        "layer; it must divide --channels")
    parser.add_argument('--layer-cfg', nargs='+', action=DictAction,
                        default={}, help='HGWCaps arguments, key=value')
    parser.add_argument(
        '--capsule-layers', type=int, default=1,
        help='how many of the last 3x3 layers are capsule layers in the '
        'capsule variants (1 to 3; the first layer stays a convolution)')
    parser.add_argument(
        '--train-angles', nargs=2, type=float, default=[0.0, 360.0],
        metavar=('LOW', 'HIGH'),
        help='range of the objects\' rotation in degrees, in training and '
        'in the plain test set')
    parser.add_argument(
        '--test-rotations', nargs='+', type=float, default=[0.0],
        metavar='DEGREES',
        help='also score every model on the test patches with each object '
        'turned by these offsets more (0: the plain test set)')
    parser.add_argument(
        '--test-ranges', nargs='+', type=float, default=[], metavar='W',
        help='also score every model on test patches drawn with their '
        'rotation in [-W, W] degrees, for each W (the paper\'s grid)')
    parser.add_argument('--threads', type=int,
                        help='torch threads (default: torch\'s)')
    parser.add_argument('--json', help='also write the runs here')
    parser.add_argument(
        '--image', help='chart (PNG) of accuracy against the rotation offset '
        'with --test-rotations, or with --grid of each variant\'s mean '
        'over the test ranges against its training range')
    parser.add_argument(
        '--pool', nargs='+', metavar='JSON',
        help='report the runs of these --json files together and train '
        'nothing (every other option but --image is then unused)')
    parser.add_argument(
        '--grid', nargs='+', metavar='JSON',
        help='report the train-and-test grid of these --json files (one '
        'training range [-W, W] or more, the same --test-ranges) and train '
        'nothing (every other option but --image is then unused)')
    return parser


def parse_args(argv=None):
    parser = build_parser()
    args = parser.parse_args(argv)
    check_unique(parser, args, 'variants', 'seeds', 'pool', 'grid')
    for name in ('steps', 'batch', 'train', 'test', 'channels', 'types',
                 'threads'):
        value = getattr(args, name)
        if value is not None and value < 1:
            parser.error(f'--{name} must be >= 1, got {value}')
    if args.size < 8:
        parser.error(f'--size must be >= 8 (two stride-2 layers), got '
                     f'{args.size}')
    if args.channels % args.types or args.channels % 2:
        parser.error(f'--types ({args.types}) must divide --channels '
                     f'({args.channels}), an even number')
    if not 1 <= args.capsule_layers <= MAX_CAPSULE_LAYERS:
        parser.error(f'--capsule-layers must be 1 to {MAX_CAPSULE_LAYERS}, '
                     f'got {args.capsule_layers}')
    if (args.capsule_layers == MAX_CAPSULE_LAYERS
            and (args.channels // 2) % args.types):
        parser.error(f'--types ({args.types}) must divide half of '
                     f'--channels ({args.channels // 2}): with '
                     f'--capsule-layers {MAX_CAPSULE_LAYERS} the second '
                     f'layer is a capsule layer')
    fixed = {'routing', 'in_types', 'out_types'} & set(args.layer_cfg)
    if fixed:
        parser.error(f'--layer-cfg cannot set {sorted(fixed)}: the variant '
                     f'and --types set them')
    try:  # HGWCaps checks its arguments when it is built
        probe_network('hgw', **network_args(args))
    except (TypeError, ValueError) as err:
        parser.error(f'--layer-cfg: {err}')
    try:
        angle_range(args.train_angles)
    except ValueError as err:
        parser.error(f'--train-angles: {err}')
    if args.pool and args.grid:
        parser.error('--pool and --grid are two reports: give one')
    if not all(math.isfinite(w) and w >= 0 for w in args.test_ranges):
        parser.error(f'--test-ranges must be finite half-widths >= 0, got '
                     f'{args.test_ranges}')
    if (args.image and not args.pool and not args.grid
            and not any(args.test_rotations)):
        parser.error('--image charts accuracy against the rotation: it '
                     'needs --test-rotations with a non-zero offset')
    if not all(math.isfinite(o) for o in args.test_rotations):
        parser.error(f'--test-rotations must be finite, got '
                     f'{args.test_rotations}')
    if args.batch > args.train:
        parser.error(f'--batch ({args.batch}) must not exceed --train '
                     f'({args.train})')
    return args


def read_saved(reader, paths):
    """``reader(paths, defaults)`` (:func:`pooled_runs`, :func:`grid_runs`)
    with the tool's defaults for options a file does not record; a file it
    refuses ends the tool with the reason."""
    try:
        return reader(paths, vars(build_parser().parse_args([])))
    except ValueError as err:
        raise SystemExit(str(err)) from None


def main(argv=None):
    args = parse_args(argv)
    if args.pool:
        runs, settings = read_saved(pooled_runs, args.pool)
        ran = {r['variant'] for r in runs}
        if args.image and not any(settings.get('test_rotations', [0])):
            raise SystemExit('--image: the pooled runs were not tested '
                             'under rotation (no --test-rotations)')
        print_reports(runs, [v for v in VARIANTS if v in ran],
                      list(dict.fromkeys(settings.get('test_rotations', [0]))),
                      args.image)
        return
    if args.grid:
        by_width, tests = read_saved(grid_runs, args.grid)
        ran = {r['variant'] for runs in by_width.values() for r in runs}
        variants = [v for v in VARIANTS if v in ran]
        print(grid_report(by_width, tests, variants))
        if args.image:
            plot_grid(by_width, tests, variants, args.image)
        return
    if args.threads:
        torch.set_num_threads(args.threads)
    size = (args.size, args.size)

    def patches(count, data_seed, offset=0.0, angles=None):
        low, high = (a + offset for a in angles or args.train_angles)
        images, labels = make_arrangement_patches(count, size, data_seed,
                                                  angles=(low, high))
        return as_tensor(images), torch.from_numpy(labels)

    data = [patches(args.train, 0), patches(args.test, 1)]
    rotated = {
        offset: patches(args.test, 1, offset)
        for offset in dict.fromkeys(args.test_rotations) if offset != 0
    }
    ranged = {
        width: patches(args.test, 1, angles=(-width, width))
        for width in dict.fromkeys(args.test_ranges)
    }
    runs = []
    for seed in args.seeds:
        for variant in args.variants:
            run = train_probe(variant, seed, data, args.steps, args.batch,
                              network_args(args), rotated, ranged)
            print(
                f'{variant} seed {seed}: test accuracy '
                f'{100 * run["test_accuracy"]:.2f}% ({run["seconds"]:.0f} '
                f's)', flush=True)
            runs.append(run)
            if args.json:  # after every run: nothing lost if stopped
                with open(args.json, 'w') as f:
                    json.dump(dict(args=vars(args), runs=runs), f, indent=1)
    print_reports(runs, args.variants, list(rotated), args.image)


if __name__ == '__main__':
    main()
