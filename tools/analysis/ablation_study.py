"""Side by side, with seeds: stock, HGW routing, uniform routing, the
paper's ablations A / B / C and the count-based observed structure.

Every variant is trained with ``tools/train.py`` and evaluated with
``tools/test.py`` (the stock Runner, ``--cfg-options randomness.seed=S``)
for every seed, on the built-in data: the lesion set (UNet, ISIC-2018
layout; mIoU / mDice) and, with ``--tasks seg det``, the shapes set (Mask
R-CNN, COCO layout; bbox / segm mAP). Writes a markdown report (mean +- std
over seeds, differences to HGW routing paired by seed, parameters, training
time per iteration) and a bar chart with error bars.

    python tools/analysis/ablation_study.py [--tasks seg [det]]
        [--seeds 0 1 2] [--variants stock hgw uniform ablA ablB ablC counts]
        [--work-dir work_dirs/ablations] [--data data/ablations]
        [--out docs/ablations.md] [--image docs/images/ablations.png]
        [--cfg-options k=v ...] [--rerun]

Finished runs (``result.json`` in their work directory) are reused, so an
interrupted study continues where it stopped; ``--rerun`` trains anew.
Text after a line ``<!-- notes -->`` in an existing report (a reading of
the results) is kept when the report is written again.
"""
import argparse
import datetime
import glob
import json
import os
import os.path as osp
import statistics
import subprocess
import sys
import time

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
sys.path.insert(0, ROOT)

#: Variant -> (description, config of the seg task, config of the det task).
VARIANTS = {
    'stock': ('stock model, no capsules',
              'configs/demo/unet-s5-d16_fcn_demo-isic.py',
              'configs/demo/mask-rcnn_r50_fpn_demo-shapes.py'),
    'hgw': ('HGW routing, as the paper',
            'configs/demo/unet-hgwcaps-s5-d16_fcn_demo-isic.py',
            'configs/demo/mask-rcnn_hgwcaps-r50_fpn_demo-shapes.py'),
}
for _tag, _what in (
        ('uniform', 'uniform routing (plan p q^T, no optimal transport)'),
        ('ablA', 'A: entropic regulariser H(T) instead of the proximal KL'),
        ('ablB', 'B: no regulariser E'),
        ('ablC', 'C: no observed structure, same Wasserstein weight'),
        ('counts', 'observed structure counted in the input patches')):
    VARIANTS[_tag] = (
        _what,
        f'configs/ablations/unet-hgwcaps-{_tag}-s5-d16_fcn_demo-isic.py',
        f'configs/ablations/mask-rcnn_hgwcaps-r50-{_tag}_fpn_demo-shapes.py')

TASKS = {
    'seg': dict(title='UNet s5-d16, lesion set (ISIC-2018 layout)',
                metrics=[('mIoU', 'mIoU'), ('mDice', 'mDice')],
                data='ISIC2018'),
    'det': dict(title='Mask R-CNN R-50 FPN, shapes set (COCO layout)',
                metrics=[('bbox mAP', 'coco/bbox_mAP'),
                         ('segm mAP', 'coco/segm_mAP')],
                data='coco'),
}


def data_options(task, data_root):
    """``--cfg-options`` pointing a demo config at ``data_root``."""
    root = osp.join(data_root, TASKS[task]['data'])
    opts = [f'{loader}.dataset.data_root={root}'
            for loader in ('train_dataloader', 'val_dataloader',
                           'test_dataloader')]
    if task == 'det':
        ann = osp.join(root, 'annotations', 'instances_val2017.json')
        opts += [f'val_evaluator.ann_file={ann}',
                 f'test_evaluator.ann_file={ann}']
    return opts


def ensure_data(data_root, tasks):
    """Generate the built-in sets (deterministic) unless present."""
    from mmhgw.datasets.synthetic import DATA_VERSION, make_all
    only = [TASKS[t]['data'] for t in tasks]
    names = {'ISIC2018': 'isic', 'coco': 'coco'}
    for sub in only:
        marker = osp.join(data_root, sub, '.complete')
        if osp.exists(marker) and open(marker).read() == DATA_VERSION:
            continue
        make_all(data_root, only=[names[sub]])
        with open(marker, 'w') as f:
            f.write(DATA_VERSION)


def run(cmd, log_path):
    """Run ``cmd`` in the repository root, output to ``log_path``."""
    with open(log_path, 'w') as log:
        done = subprocess.run(cmd, cwd=ROOT, stdout=log,
                              stderr=subprocess.STDOUT, text=True)
    if done.returncode:
        with open(log_path) as f:
            tail = f.read()[-3000:]
        raise SystemExit(f'{" ".join(cmd)} failed ({done.returncode}); '
                         f'see {log_path}:\n{tail}')


def iteration_times(work):
    """Per-iteration training times logged by the Runner (``time`` in the
    scalars of the LocalVisBackend), first iteration left out (warm-up)."""
    times = []
    for path in glob.glob(osp.join(work, '*', 'vis_data', 'scalars.json')):
        with open(path) as f:
            for line in f:
                entry = json.loads(line)
                if 'time' in entry and 'loss' in entry:
                    times.append((entry['step'], entry['time']))
    times = [t for _, t in sorted(times)]
    return times[1:] if len(times) > 1 else times


def train_and_test(task, variant, seed, args):
    """One run; its result dict (metrics, time per iteration)."""
    config = VARIANTS[variant][1 if task == 'seg' else 2]
    work = osp.join(args.work_dir, task, variant, f'seed{seed}')
    result_file = osp.join(work, 'result.json')
    if osp.exists(result_file) and not args.rerun:
        with open(result_file) as f:
            return json.load(f)
    os.makedirs(work, exist_ok=True)
    start = time.perf_counter()
    from mmengine.config import Config, DictAction
    options = data_options(task, args.data) + list(args.cfg_options or [])
    cfg = Config.fromfile(osp.join(ROOT, config))
    cfg.merge_from_dict({
        key: DictAction._parse_iterable(value)
        for key, value in (o.split('=', 1) for o in options)})
    iters = int(cfg.train_cfg.max_iters)
    print(f'{task} {variant:8s} seed {seed}: training {iters} iterations',
          flush=True)
    # One checkpoint at the end, no validation inside the training run:
    # the evaluation is the test tool's.
    run([sys.executable, 'tools/train.py', config, '--work-dir', work,
         '--cfg-options', f'randomness.seed={seed}',
         'train_cfg.val_interval=100000000',
         f'default_hooks.checkpoint.interval={iters}',
         'default_hooks.logger.interval=1', *options],
        osp.join(work, 'train.out'))
    from mmhgw.engine.work_dir import latest_checkpoint
    checkpoint = latest_checkpoint(work)
    metrics_file = osp.join(work, 'metrics.json')
    run([sys.executable, 'tools/test.py', config, checkpoint, '--work-dir',
         osp.join(work, 'test'), '--metrics-out', metrics_file,
         '--cfg-options', f'randomness.seed={seed}', *options],
        osp.join(work, 'test.out'))
    with open(metrics_file) as f:
        metrics = json.load(f)
    times = iteration_times(work)
    result = dict(task=task, variant=variant, seed=seed, iters=iters,
                  metrics={name: metrics.get(key) for name, key in
                           TASKS[task]['metrics']},
                  time_per_iter=statistics.fmean(times) if times else None,
                  wall_minutes=(time.perf_counter() - start) / 60)
    with open(result_file, 'w') as f:
        json.dump(result, f, indent=2)
    return result


def count_parameters(task, variant):
    from mmhgw.testing import build_model_for_test, load_config_for_test
    cfg = load_config_for_test(
        osp.join(ROOT, VARIANTS[variant][1 if task == 'seg' else 2]))
    model = build_model_for_test(cfg, init=False)
    return sum(p.numel() for p in model.parameters())


def mean_std(values):
    values = [v for v in values if v is not None]
    if not values:
        return None, None
    std = statistics.stdev(values) if len(values) > 1 else 0.0
    return statistics.fmean(values), std


def fmt(mean, std, digits=2):
    if mean is None:
        return 'n/a'
    return f'{mean:.{digits}f} ± {std:.{digits}f}'


def task_section(task, variants, results, params):
    """Markdown table of one task."""
    spec = TASKS[task]
    digits = 2 if task == 'seg' else 3
    names = [name for name, _ in spec['metrics']]
    header = (['variant', 'what', 'params', 'time / iter (s)'] +
              [f'{n} (mean ± std)' for n in names] +
              [f'{names[0]} - HGW (paired)', f'{names[0]} per seed'])
    lines = ['| ' + ' | '.join(header) + ' |',
             '|' + '---|' * len(header)]
    by_seed = {v: {r['seed']: r for r in results[v]} for v in variants}
    for v in variants:
        runs = results[v]
        cells = [v, VARIANTS[v][0], f'{params[v] / 1e6:.2f}M',
                 fmt(*mean_std([r['time_per_iter'] for r in runs]))]
        for name in names:
            cells.append(fmt(*mean_std([r['metrics'][name] for r in runs]),
                             digits))
        if 'hgw' in by_seed and v != 'hgw':
            diffs = [by_seed[v][s]['metrics'][names[0]] -
                     by_seed['hgw'][s]['metrics'][names[0]]
                     for s in by_seed[v] if s in by_seed['hgw']]
            cells.append(fmt(*mean_std(diffs), digits))
        else:
            cells.append('')
        cells.append(', '.join(
            f'{r["metrics"][names[0]]:.{digits}f}' for r in
            sorted(runs, key=lambda r: r['seed'])))
        lines.append('| ' + ' | '.join(cells) + ' |')
    return '\n'.join(lines)


def bar_chart(tasks, variants, results, path):
    """One panel per task and metric: mean over seeds, std as error bar,
    every seed as a dot."""
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    panels = [(task, name) for task in tasks
              for name, _ in TASKS[task]['metrics']]
    fig, axes = plt.subplots(1, len(panels), figsize=(
        max(4.0, 0.65 * len(variants)) * len(panels), 3.6), squeeze=False)
    for ax, (task, name) in zip(axes[0], panels):
        runs = results[task]
        means, stds = zip(*(mean_std([r['metrics'][name] for r in runs[v]])
                            for v in variants))
        xs = range(len(variants))
        ax.bar(xs, [m or 0 for m in means], yerr=[s or 0 for s in stds],
               capsize=4, color=['0.6' if v == 'stock' else
                                 'tab:blue' if v == 'hgw' else 'tab:orange'
                                 for v in variants])
        for x, v in zip(xs, variants):
            ys = [r['metrics'][name] for r in runs[v]
                  if r['metrics'][name] is not None]
            ax.plot([x] * len(ys), ys, 'k.', markersize=4)
        ax.set_xticks(list(xs), variants, rotation=30)
        ax.set_title(f'{task}: {name}', fontsize=10)
        valid = [m for m in means if m is not None]
        if valid:
            low = min(min(valid) - 3 * max(s or 0 for s in stds),
                      min(valid) * 0.9)
            ax.set_ylim(bottom=max(0.0, low))
    fig.tight_layout()
    os.makedirs(osp.dirname(osp.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


NOTES_MARKER = '<!-- notes -->'


def report(args, tasks, results, params, duration):
    seeds = ', '.join(str(s) for s in args.seeds)
    data = osp.relpath(args.data, ROOT)
    if data.startswith('..'):  # outside the project: as given
        data = args.data
    iters = {t: sorted({r['iters'] for v in results[t]
                        for r in results[t][v]}) for t in tasks}
    image_rel = osp.relpath(osp.abspath(args.image),
                            osp.dirname(osp.abspath(args.out)))
    parts = [
        '# Ablation study\n',
        f'Written by `tools/analysis/ablation_study.py` on '
        f'{datetime.date.today().isoformat()} ({duration}). Every '
        f'variant trained with `tools/train.py` and evaluated with '
        f'`tools/test.py` for seeds {seeds} (`randomness.seed`), on the '
        f'built-in data in `{data}`, from scratch, on the CPU. Mean ± '
        f'standard deviation over seeds; "- HGW (paired)" is the mean ± std '
        f'of the per-seed difference to HGW routing of the same seed. Time '
        f'per iteration is the Runner\'s logged training time per '
        f'iteration, the first left out.\n']
    if args.cfg_options:
        parts.append('Options for every run: `' +
                     ' '.join(args.cfg_options) + '`.\n')
    for task in tasks:
        parts.append(f'## {TASKS[task]["title"]}, '
                     f'{"/".join(map(str, iters[task]))} iterations\n')
        parts.append(task_section(task, args.variants, results[task],
                                  params[task]) + '\n')
    parts.append(f'![ablation bar chart]({image_rel})\n')
    return '\n'.join(parts)


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--tasks', nargs='+', default=['seg'],
                        choices=list(TASKS))
    parser.add_argument('--variants', nargs='+', default=list(VARIANTS),
                        choices=list(VARIANTS))
    parser.add_argument('--seeds', nargs='+', type=int, default=[0, 1, 2])
    parser.add_argument('--work-dir',
                        default=osp.join(ROOT, 'work_dirs', 'ablations'))
    parser.add_argument('--data', default=osp.join(ROOT, 'data',
                                                   'ablations'))
    parser.add_argument('--out', default=osp.join(ROOT, 'docs',
                                                  'ablations.md'))
    parser.add_argument('--image', default=osp.join(ROOT, 'docs', 'images',
                                                    'ablations.png'))
    parser.add_argument('--cfg-options', nargs='+', default=None,
                        help='key=value options for every train / test run')
    parser.add_argument('--rerun', action='store_true',
                        help='train again even where a result exists')
    return parser.parse_args()


def main():
    args = parse_args()
    args.data = osp.abspath(args.data)
    start = time.perf_counter()
    ensure_data(args.data, args.tasks)
    results, params = {}, {}
    for task in args.tasks:
        results[task] = {v: [train_and_test(task, v, s, args)
                             for s in args.seeds] for v in args.variants}
        params[task] = {v: count_parameters(task, v) for v in args.variants}
    minutes = (time.perf_counter() - start) / 60
    runs = [r for task in results.values() for rs in task.values()
            for r in rs]
    if all('wall_minutes' in r for r in runs):
        # Runs reused from earlier invocations count with their own time.
        duration = (f'{len(runs)} runs, '
                   f'{sum(r["wall_minutes"] for r in runs):.0f} min of '
                   f'training and testing')
    else:
        duration = f'this invocation {minutes:.0f} min'
    bar_chart(args.tasks, args.variants, results, args.image)
    text = report(args, args.tasks, results, params, duration)
    os.makedirs(osp.dirname(osp.abspath(args.out)), exist_ok=True)
    if osp.exists(args.out):
        with open(args.out) as f:
            old = f.read()
        if NOTES_MARKER in old:
            text += '\n' + old[old.index(NOTES_MARKER):]
    with open(args.out, 'w') as f:
        f.write(text)
    print('\n' + text)
    print(f'written to {args.out} and {args.image}')


if __name__ == '__main__':
    main()
