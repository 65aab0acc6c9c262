"""Accuracy of trained segmentors and detectors under test-time affine
transformations.

Every model is evaluated on its config's test set with the images and
labels warped by one affine map per sweep value (``AffineWarp``: rotation,
isotropic scaling or horizontal shear about the image centre). Segmentors:
mask pixels brought in from outside the image are ignored by the metric.
Detectors (mmdet's ``CocoMetric``): the metric scores against the warped
boxes and masks of the test pipeline (``InstancesFromLabels``) instead of
its annotation file, so the test pipeline must load the annotations, as
mmdet's stock test pipelines do; objects warped out of the image drop out.
Writes the metric per model and value as JSON and plots one curve per
model::

    python tools/analysis/affine_robustness.py \\
        --model stock CONFIG CHECKPOINT --model hgw CONFIG CHECKPOINT \\
        --sweep rotation --values 0 15 30 45 60 75 90 \\
        --out work_dirs/robustness/rotation.json \\
        [--image docs/images/robustness_rotation.png] \\
        [--metric mIoU [sep/AUC ...]] [--cfg-options k=v ...]

(by default ``mIoU`` for segmentors and, for detectors, the main score of
each kind their ``CocoMetric`` evaluates: ``coco/bbox_mAP coco/segm_mAP``
for Mask R-CNN).

Several ``--model`` entries of the same label (seeds of one variant) are
averaged, with their standard deviation as the band of the curve. Prints,
per metric, a markdown table: the score at each value, its change from the
unwarped images (rotation or shear 0, scale 1; when the sweep has that
value) and that change's difference to the ``--reference`` label's, paired
model by model in the order given (give each label's seeds in the same
order), with a 95% Student-t interval; the tables also go to the JSON.
The JSON is written after each model too (marked ``partial``), so an
interrupted sweep keeps what it finished. ``--merge`` adds the models of
earlier runs of this tool (their JSON, partial or not: same sweep and
metrics), so that a sweep can run as several processes::

    python tools/analysis/affine_robustness.py --merge a.json b.json \
        --reference stock --out all.json [--image all.png]
"""
import argparse
import json
import os
import os.path as osp
import statistics

from mmhgw.analysis.paired import fmt_interval, mean_std
from mmhgw.analysis.plots import plot_sweep
from mmhgw.config_utils import (add_model_args, check_files, check_model_args,
                                check_unique)

#: Sweep name -> (the AffineWarp argument it sets, the value that leaves
#: the images as they are).
SWEEPS = {
    'rotation': ('angle', 0.0), 'scale': ('scale', 1.0),
    'shear': ('shear', 0.0)
}

#: Transforms after which an AffineWarp goes (each loads what it warps).
LOADERS = ('LoadImageFromFile', 'LoadAnnotations')


def _det_meta_keys() -> tuple:
    """PackDetInputs' own meta_keys, for a pipeline that sets none."""
    import inspect

    from mmdet.datasets.transforms import PackDetInputs
    return tuple(
        inspect.signature(PackDetInputs).parameters['meta_keys'].default)


def _type(step: dict) -> str:
    return step.get('type', '').split('.')[-1]


def warped_pipeline(pipeline, warp: dict, instances: bool = False) -> list:
    """``pipeline`` with ``warp`` (an AffineWarp config) inserted after
    every loading transform, so the image and the labels are each warped at
    the size they are read at. With ``instances`` (a detector scored by
    ``CocoMetric`` without its annotation file), ``InstancesFromLabels``
    goes before ``PackDetInputs``, which packs the warped instances."""
    out = []
    for step in pipeline:
        out.append(step)
        if _type(step) in LOADERS:
            out.append(dict(warp))
    if len(out) == len(pipeline):
        raise ValueError('the test pipeline has no LoadImageFromFile / '
                         'LoadAnnotations step to warp after')
    if not instances:
        return out
    if not any(_type(step) == 'LoadAnnotations' for step in out):
        raise ValueError('the test pipeline loads no annotations: add '
                         'LoadAnnotations(with_bbox=True[, with_mask=True]) '
                         'so that the metric can score against the warped '
                         'labels')
    packs = [i for i, step in enumerate(out) if _type(step) == 'PackDetInputs']
    if not packs:
        raise ValueError('the test pipeline has no PackDetInputs step to '
                         'pack the warped instances for CocoMetric')
    pack = dict(out[packs[-1]])
    keys = pack.get('meta_keys')
    keys = tuple(_det_meta_keys() if keys is None else keys)
    pack['meta_keys'] = keys + ('instances', ) * ('instances' not in keys)
    out[packs[-1]] = pack
    out.insert(packs[-1], dict(type='InstancesFromLabels'))
    return out


def _coco_metrics(cfg) -> list:
    """The ``CocoMetric`` entries of ``cfg``'s test evaluator (a dict or a
    list of them); any other that reads its ground truth from a file the
    warp cannot reach is refused."""
    evaluators = cfg.get('test_evaluator') or []
    if not isinstance(evaluators, (list, tuple)):
        evaluators = [evaluators]
    coco = []
    for evaluator in evaluators:
        if _type(evaluator) == 'CocoMetric':
            coco.append(evaluator)
        elif evaluator.get('ann_file'):
            raise ValueError(
                f'test_evaluator {_type(evaluator)}: scores against its '
                'ann_file, which the warp does not reach (CocoMetric and the '
                'metrics that read the pipeline\'s labels can be swept)')
    return coco


def warp_test_cfg(cfg, warp: dict) -> None:
    """Puts ``warp`` into ``cfg``'s test pipeline and has its metrics score
    the warped labels: the pipeline's own for metrics that read them
    (mmseg's), the packed ``instances`` for ``CocoMetric``, whose
    ``ann_file`` is dropped."""
    coco = _coco_metrics(cfg)
    dataset = cfg.test_dataloader.dataset
    dataset.pipeline = warped_pipeline(dataset.pipeline, warp, bool(coco))
    for evaluator in coco:
        evaluator['ann_file'] = None


def coco_metric_names(evaluator: dict) -> tuple:
    """``(prefix, main)`` of a ``CocoMetric`` config: the prefix of every
    name it reports (``'coco'`` unless set) and the main score of each kind
    it evaluates, in order: ``<prefix>/bbox_mAP``, ``<prefix>/segm_mAP``
    (``metric_items``' first where they leave out ``mAP``), and for
    proposals ``<prefix>/AR@100`` (or the first of ``metric_items``)."""
    prefix = evaluator.get('prefix') or 'coco'
    kinds = evaluator.get('metric', 'bbox')
    items = evaluator.get('metric_items')
    main = []
    for kind in [kinds] if isinstance(kinds, str) else kinds:
        if kind in ('bbox', 'segm'):
            item = 'mAP' if not items or 'mAP' in items else items[0]
            main.append(f'{prefix}/{kind}_{item}')
        else:  # proposal, proposal_fast: recalls, named without the kind
            main.append(f'{prefix}/{items[0] if items else "AR@100"}')
    return prefix, main


def resolve_metrics(models, metrics, options) -> list:
    """The metrics to record, checked before any model runs. Given, each
    must be one a detector's ``CocoMetric`` can report (its names begin
    with its prefix, ``coco/`` unless set); with none given, the main
    scores of the models' kind: ``mIoU`` for segmentors, those of
    :func:`coco_metric_names` for detectors (models of both kinds need
    ``--metric``). Each config is loaded once."""
    from mmengine.config import Config

    from mmhgw.config_utils import merge_cfg_options
    scored = {}  # config -> (label, CocoMetric prefixes or (), main scores)
    for label, config, _ in models:
        if config in scored:
            continue
        cfg = Config.fromfile(config)
        merge_cfg_options(cfg, options)
        coco = [coco_metric_names(e) for e in _coco_metrics(cfg)]
        prefixes = tuple(f'{prefix}/' for prefix, _ in coco)
        main = list(dict.fromkeys(n for _, names in coco for n in names))
        scored[config] = (label, prefixes, main or ['mIoU'])
    if metrics:
        for label, prefixes, main in scored.values():
            wrong = [m for m in metrics if not m.startswith(prefixes)]
            if prefixes and wrong:
                raise ValueError(
                    f'--metric {" ".join(wrong)}: model {label} is scored '
                    f'by CocoMetric, whose metrics are named '
                    f'{", ".join(main)}, ...')
        return metrics
    kinds = {tuple(main) for _, _, main in scored.values()}
    if len(kinds) > 1:
        raise ValueError(
            '--metric is needed: the models\' main scores differ (' +
            '; '.join(f'{label}: {" ".join(main)}'
                      for label, _, main in scored.values()) + ')')
    return list(kinds.pop()) if kinds else ['mIoU']


def evaluate(config: str, checkpoint: str, warp: dict, options) -> dict:
    """Test metrics of ``checkpoint`` with ``warp`` in the test pipeline."""
    from mmhgw.config_utils import checkpoint_metrics
    return checkpoint_metrics(config, checkpoint, options,
                              change_cfg=lambda cfg: warp_test_cfg(cfg, warp))


def sweep(models, name: str, values, metrics, options, save=None) -> dict:
    """``{metric: {label: {value: [score per model of that label]}}}`` for
    each name in ``metrics``; ``save(results)`` after each model, so that an
    interrupted sweep keeps the models it finished."""
    key, _ = SWEEPS[name]
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
        if save is not None:
            save(results)
    return results


def summary(results: dict) -> dict:
    """Mean and standard deviation over the models of each label."""
    out = {}
    for label, per_value in results.items():
        out[label] = {}
        for value, runs in per_value.items():
            mean, std = mean_std(runs)
            out[label][value] = dict(mean=mean, std=std, runs=runs)
    return out


def load_results(path: str) -> tuple:
    """``(sweep, {metric: {label: {value: runs}}})`` of this tool's JSON."""
    with open(path) as f:
        data = json.load(f)
    if not isinstance(data, dict) or not {'sweep', 'metric', 'results'} <= \
            set(data):
        raise ValueError(f'{path}: not a JSON written by this tool (expected '
                         'the keys sweep, metric, results)')
    stats = {data['metric']: data['results'], **data.get('others', {})}
    return data['sweep'], {
        metric: {
            label: {
                value: point['runs']
                for value, point in per_value.items()
            }
            for label, per_value in per_label.items()
        }
        for metric, per_label in stats.items()
    }


def join(results: dict, other: dict, source: str) -> dict:
    """``results`` and ``other`` ({metric: {label: {value: runs}}}, either
    may be empty) together: same metrics, no label in both (``source``
    names ``other`` in the error)."""
    if results and other and set(other) != set(results):
        raise ValueError(f'{source}: metrics {sorted(other)}, expected '
                         f'{sorted(results)}')
    joined = {m: dict(per_label) for m, per_label in results.items()}
    for metric, per_label in other.items():
        for label, per_value in per_label.items():
            if label in joined.setdefault(metric, {}):
                raise ValueError(f'{source}: label {label!r} is already '
                                 'among the models')
            joined[metric][label] = per_value
    return joined


def merge(results: dict, sweep_name: str, paths) -> dict:
    """``results`` with the models of the JSON files ``paths`` (this
    tool's output of a ``sweep_name`` sweep)."""
    for path in paths:
        name, other = load_results(path)
        if name != sweep_name:
            raise ValueError(f'--merge {path}: a {name} sweep, expected '
                             f'{sweep_name}')
        results = join(results, other, f'--merge {path}')
    return results


def write_results(path: str, name: str, results: dict, metrics,
                  reference=None) -> dict:
    """Write ``results`` as this tool's JSON at ``path`` (the first of
    ``metrics`` under "results", the others under "others"), with the
    tables against ``reference`` unless None (a sweep in progress);
    returns the tables."""
    first, *others = metrics
    data = dict(sweep=name, metric=first, results=summary(results[first]),
                others={m: summary(results[m])
                        for m in others})
    tables = {}
    if reference is not None:
        tables = {m: table(results[m], name, m, reference) for m in metrics}
        data.update(reference=reference, tables=tables)
    else:
        data['partial'] = True
    os.makedirs(osp.dirname(osp.abspath(path)), exist_ok=True)
    with open(path, 'w') as f:
        json.dump(data, f, indent=2)
    return tables


def table(results: dict, name: str, metric: str, reference: str) -> str:
    """Markdown table of one metric (``results``: {label: {value: runs}}):
    mean and std at each value, the change from the identity value (when
    swept) and its paired difference to ``reference``'s change."""
    values = sorted({v
                     for per_value in results.values()
                     for v in per_value}, key=float)
    identity = next((v for v in values if float(v) == SWEEPS[name][1]), None)
    others = [v for v in values if v != identity]

    def change(label, value):
        if label not in results:
            return None
        runs, base = results[label].get(value), results[label].get(identity)
        if identity is None:
            return runs
        if runs is None or base is None or len(runs) != len(base):
            return None
        return [r - b for r, b in zip(runs, base)]

    what = 'change' if identity is not None else metric
    header = ['variant', 'models'] + [f'{metric} at {v}' for v in values]
    if identity is not None:
        header += [f'change at {v}' for v in others]
    header += [f'{what} - {reference}, at {v}, 95% CI' for v in others]
    lines = ['| ' + ' | '.join(header) + ' |', '|' + '---|' * len(header)]
    for label, per_value in results.items():
        counts = sorted({len(runs) for runs in per_value.values()})
        cells = [label, '/'.join(str(c) for c in counts)]
        for v in values:
            runs = per_value.get(v)
            mean, std = mean_std(runs or [])
            cells.append(f'{mean:.2f} ± {std:.2f}' if runs else '')
        if identity is not None:
            for v in others:
                diffs = change(label, v)
                cells.append(
                    f'{statistics.fmean(diffs):+.2f}' if diffs else '')
        for v in others:
            mine, ref = change(label, v), change(reference, v)
            if label == reference or not mine or not ref:
                cells.append('')
            elif len(mine) != len(ref):
                cells.append('n/a (model counts differ)')
            else:
                cells.append(fmt_interval([a - b for a, b in zip(mine, ref)]))
        lines.append('| ' + ' | '.join(cells) + ' |')
    return '\n'.join(lines)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_model_args(parser, required=False)
    parser.add_argument(
        '--sweep', choices=list(SWEEPS),
        help='rotation (default with --model), scale or '
        'shear; with --merge alone, that of the files')
    parser.add_argument('--values', nargs='+', type=float,
                        help='the sweep\'s values (with --model)')
    parser.add_argument(
        '--metric', nargs='+',
        help='test metrics to record (default: mIoU for segmentors, '
        'coco/bbox_mAP and coco/segm_mAP for Mask R-CNN, as its '
        'CocoMetric evaluates); the first is plotted and is the JSON\'s '
        '"results", the others go to "others"')
    parser.add_argument(
        '--merge', nargs='+', metavar='JSON',
        help='outputs of earlier runs of this tool to '
        'include')
    parser.add_argument(
        '--reference', help='the label whose change the others are '
        'compared with (default: the first label)')
    parser.add_argument('--out', required=True, help='JSON file to write')
    parser.add_argument('--image', help='PNG plot to write')
    args = parser.parse_args(argv)
    check_unique(parser, args, 'values', 'metric')
    if not args.model and not args.merge:
        parser.error('give --model (models to test) or --merge (results of '
                     'earlier runs), or both')
    if args.model:
        if not args.values:
            parser.error('--values is required with --model')
        check_model_args(parser, args.model)
    check_files(parser, [('--merge:', path) for path in args.merge or []])
    return args


def main(argv=None):
    args = parse_args(argv)
    # Everything that can be refused is checked before the first model
    # runs: a sweep of many models takes hours.
    name = args.sweep
    if name is None:
        name = load_results(args.merge[0])[0] if args.merge else 'rotation'
    earlier = merge({}, name, args.merge or [])
    metrics = args.metric or (list(earlier) if earlier else None)
    if earlier and set(metrics) != set(earlier):
        raise ValueError(f'--metric {metrics}: the --merge results have '
                         f'{list(earlier)}')
    metrics = resolve_metrics(args.model or [], metrics, args.cfg_options)
    labels = [label for label, _, _ in args.model or []]
    for label in labels:
        if earlier and label in earlier[metrics[0]]:
            raise ValueError(f'--model {label}: the label is already among '
                             'the --merge results')
    labels += list(earlier.get(metrics[0], {}))
    reference = args.reference or labels[0]
    if reference not in labels:
        raise ValueError(f'--reference {reference!r}: not among the labels '
                         f'{sorted(set(labels))}')

    results = {}
    if args.model:
        results = sweep(
            args.model, name, args.values, metrics, args.cfg_options,
            save=lambda done: write_results(args.out, name, done, metrics))
    results = join(results, earlier, '--merge')
    tables = write_results(args.out, name, results, metrics, reference)
    for metric, text in tables.items():
        print(f'\n{metric} ({name}):\n{text}')
    if args.image:
        unit = '' if name == 'scale' else ' (degrees)'
        plot_sweep(summary(results[metrics[0]]), f'{name}{unit}', metrics[0],
                   args.image)
    print(f'written to {args.out}' +
          (f' and {args.image}' if args.image else ''))


if __name__ == '__main__':
    main()
