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
ramped as in training (HGWBetaWarmupHook's schedule). Every variant sees the
same training patches (data seed 0) and test patches (data seed 1); the
seed sets the initialisation and the batch order. The report: test
accuracy per variant (mean, std, per seed) and the paired differences with
their 95% interval (:mod:`mmhgw.analysis.paired`), as trained and with the
BN running statistics recomputed as plain averages over the training
patches under the final weights.

    python tools/analysis/arrangement_probe.py [--variants stock hgw uniform]
        [--seeds 0 1 2 3 4] [--steps 1000] [--batch 32] [--train 4000]
        [--test 2000] [--size 32] [--channels 64] [--types 16]
        [--layer-cfg key=value ...] [--threads 1] [--json FILE]

``--layer-cfg`` sets HGWCaps arguments (e.g. ``temperature=0.03``) for
both capsule variants.
"""
import argparse
import copy
import json
import statistics
import time
from types import SimpleNamespace

import numpy as np
import torch
import torch.nn as nn

from mmhgw.analysis.paired import fmt_interval

VARIANTS = ('stock', 'hgw', 'uniform')
#: Iterations of the beta ramp, as a share of the steps.
WARMUP_SHARE = 0.25


def probe_network(variant: str, channels: int = 64, types: int = 16,
                  layer_cfg: dict = None) -> nn.Sequential:
    """The probe classifier with ``variant``'s layer under test."""

    def block(cin, cout, stride):
        return [
            nn.Conv2d(cin, cout, 3, stride, 1, bias=False),
            nn.BatchNorm2d(cout),
            nn.ReLU(inplace=True)
        ]

    if variant == 'stock':
        layer = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
    else:
        from mmhgw.models import HGWCaps
        layer = HGWCaps(channels, channels, 3, padding=1, in_types=types,
                        out_types=types, routing=variant, **(layer_cfg or {}))
    return nn.Sequential(*block(3, channels // 2, 1),
                         *block(channels // 2, channels, 2),
                         *block(channels, channels, 2), layer,
                         nn.BatchNorm2d(channels), nn.ReLU(inplace=True),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(),
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


def train_probe(variant, seed, data, steps, batch, channels, types,
                layer_cfg) -> dict:
    """Train one probe; its test accuracy (also with its BN statistics
    recomputed over the training patches, ``recompute_bn_statistics``),
    last losses and seconds."""
    from mmhgw.engine.hooks import HGWBetaWarmupHook, recompute_bn_statistics
    (x_train, y_train), (x_test, y_test) = data
    torch.manual_seed(seed)
    model = probe_network(variant, channels, types, layer_cfg)
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
        train_accuracy=accuracy(model, x_train, y_train),
        final_loss=statistics.fmean(tail), seconds=time.perf_counter() - start)


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
        std = statistics.stdev(acc) if len(acc) > 1 else 0.0
        train = statistics.fmean(100 * r['train_accuracy']
                                 for r in by[v].values())
        sec = statistics.fmean(r['seconds'] for r in by[v].values())
        per = ', '.join(f'{a:.1f}' for a in acc)
        lines.append(f'| {v} | {statistics.fmean(acc):.2f} ± {std:.2f} | '
                     f'{per} | {train:.1f} | {sec:.0f} |')
    for a, b in (('hgw', 'uniform'), ('hgw', 'stock'), ('uniform', 'stock')):
        seeds = sorted(set(by.get(a, {})) & set(by.get(b, {})))
        if not seeds:
            continue
        diffs = [100 * (by[a][s][key] - by[b][s][key]) for s in seeds]
        per = ', '.join(f'{d:+.1f}' for d in diffs)
        lines.append(f'| {a} minus {b} | {fmt_interval(diffs)} | {per} | | |')
    return '\n'.join(lines)


def parse_args(argv=None):
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
    parser.add_argument('--threads', type=int,
                        help='torch threads (default: torch\'s)')
    parser.add_argument('--json', help='also write the runs here')
    args = parser.parse_args(argv)
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
    fixed = {'routing', 'in_types', 'out_types'} & set(args.layer_cfg)
    if fixed:
        parser.error(f'--layer-cfg cannot set {sorted(fixed)}: the variant '
                     f'and --types set them')
    try:  # HGWCaps checks its arguments when it is built
        probe_network('hgw', args.channels, args.types, args.layer_cfg)
    except (TypeError, ValueError) as err:
        parser.error(f'--layer-cfg: {err}')
    if args.batch > args.train:
        parser.error(f'--batch ({args.batch}) must not exceed --train '
                     f'({args.train})')
    return args


def main(argv=None):
    from mmhgw.datasets.synthetic import make_arrangement_patches
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    size = (args.size, args.size)
    data = []
    for count, data_seed in ((args.train, 0), (args.test, 1)):
        images, labels = make_arrangement_patches(count, size, data_seed)
        data.append((as_tensor(images), torch.from_numpy(labels)))
    runs = []
    for seed in args.seeds:
        for variant in args.variants:
            run = train_probe(variant, seed, data, args.steps, args.batch,
                              args.channels, args.types, args.layer_cfg)
            print(
                f'{variant} seed {seed}: test accuracy '
                f'{100 * run["test_accuracy"]:.2f}% ({run["seconds"]:.0f} '
                f's)', flush=True)
            runs.append(run)
            if args.json:  # after every run: nothing lost if stopped
                with open(args.json, 'w') as f:
                    json.dump(dict(args=vars(args), runs=runs), f, indent=1)
    print(report(runs, args.variants))
    print('\nWith BN statistics recomputed over the training patches:\n')
    print(report(runs, args.variants, 'test_accuracy_recomputed_bn'))


if __name__ == '__main__':
    main()
