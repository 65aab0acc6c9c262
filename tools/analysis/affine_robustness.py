"""Accuracy of trained segmentors under test-time affine transformations.

Every model is evaluated on its config's test set with the images and
masks warped by one affine map per sweep value (``AffineWarp``: rotation,
isotropic scaling or horizontal shear about the image centre; pixels
brought in from outside the image are ignored by the metric). Writes the
metric per model and value as JSON and plots one curve per model::

    python tools/analysis/affine_robustness.py \\
        --model stock CONFIG CHECKPOINT --model hgw CONFIG CHECKPOINT \\
        --sweep rotation --values 0 15 30 45 60 75 90 \\
        --out work_dirs/robustness/rotation.json \\
        [--image docs/images/robustness_rotation.png] \\
        [--metric mIoU [sep/AUC ...]] [--cfg-options k=v ...]

Several ``--model`` entries of the same label (seeds of one variant) are
averaged, with their standard deviation as the band of the curve.
"""
import argparse
import json
import os
import os.path as osp
import statistics

from mmhgw.config_utils import add_model_args, check_model_args

#: Sweep name -> the AffineWarp argument it sets.
SWEEPS = {'rotation': 'angle', 'scale': 'scale', 'shear': 'shear'}

#: Transforms after which an AffineWarp goes (each loads what it warps).
LOADERS = ('LoadImageFromFile', 'LoadAnnotations')


def warped_pipeline(pipeline, warp: dict) -> list:
    """``pipeline`` with ``warp`` (an AffineWarp config) inserted after
    every loading transform, so the image and the labels are each warped at
    the size they are read at."""
    out = []
    for step in pipeline:
        out.append(step)
        if step.get('type', '').split('.')[-1] in LOADERS:
            out.append(dict(warp))
    if len(out) == len(pipeline):
        raise ValueError('the test pipeline has no LoadImageFromFile / '
                         'LoadAnnotations step to warp after')
    return out


def evaluate(config: str, checkpoint: str, warp: dict, options) -> dict:
    """Test metrics of ``checkpoint`` with ``warp`` in the test pipeline."""
    from mmhgw.config_utils import checkpoint_metrics
    return checkpoint_metrics(
        config, checkpoint, options,
        change_pipeline=lambda pipeline: warped_pipeline(pipeline, warp))


def sweep(models, name: str, values, metrics, options) -> dict:
    """``{metric: {label: {value: [score per model of that label]}}}`` for
    each name in ``metrics``."""
    key = SWEEPS[name]
    results = {metric: {} for metric in metrics}
    for label, config, checkpoint in models:
        for value in values:
            warp = dict(type='AffineWarp', **{key: value})
            scores = evaluate(config, checkpoint, warp, options)
            for metric in metrics:
                if metric not in scores:
                    raise KeyError(f'metric {metric!r} not among the test '
                                   f'metrics of {config}: {sorted(scores)}')
                results[metric].setdefault(label, {}).setdefault(
                    str(value), []).append(scores[metric])
            print(
                f'{label:10s} {name} {value}: ' +
                ', '.join(f'{m} {scores[m]:.2f}' for m in metrics), flush=True)
    return results


def summary(results: dict) -> dict:
    """Mean and standard deviation over the models of each label."""
    out = {}
    for label, per_value in results.items():
        out[label] = {}
        for value, runs in per_value.items():
            std = statistics.stdev(runs) if len(runs) > 1 else 0.0
            out[label][value] = dict(mean=statistics.fmean(runs), std=std,
                                     runs=runs)
    return out


def plot(stats: dict, name: str, metric: str, path: str):
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(5, 3.4))
    for label, per_value in stats.items():
        xs = [float(v) for v in per_value]
        means = [s['mean'] for s in per_value.values()]
        stds = [s['std'] for s in per_value.values()]
        ax.plot(xs, means, marker='o', label=label)
        ax.fill_between(xs, [m - s for m, s in zip(means, stds)],
                        [m + s for m, s in zip(means, stds)], alpha=0.2)
    unit = '' if name == 'scale' else ' (degrees)'
    ax.set_xlabel(f'{name}{unit}')
    ax.set_ylabel(metric)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    os.makedirs(osp.dirname(osp.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_model_args(parser)
    parser.add_argument('--sweep', choices=list(SWEEPS), default='rotation')
    parser.add_argument('--values', nargs='+', type=float, required=True)
    parser.add_argument(
        '--metric', nargs='+', default=['mIoU'],
        help='test metrics to record; the first is '
        'plotted and is the JSON\'s "results", the others '
        'go to "others"')
    parser.add_argument('--out', required=True, help='JSON file to write')
    parser.add_argument('--image', help='PNG plot to write')
    args = parser.parse_args(argv)
    check_model_args(parser, args.model)
    return args


def main(argv=None):
    args = parse_args(argv)
    results = sweep(args.model, args.sweep, args.values, args.metric,
                    args.cfg_options)
    first, *others = args.metric
    stats = summary(results[first])
    os.makedirs(osp.dirname(osp.abspath(args.out)), exist_ok=True)
    with open(args.out, 'w') as f:
        json.dump(
            dict(sweep=args.sweep, metric=first, results=stats,
                 others={m: summary(results[m])
                         for m in others}), f, indent=2)
    if args.image:
        plot(stats, args.sweep, first, args.image)
    print(f'written to {args.out}' +
          (f' and {args.image}' if args.image else ''))


if __name__ == '__main__':
    main()
