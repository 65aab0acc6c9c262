"""The main job on built-in data: train and evaluate HGWCaps models beside
their stock counterparts, on the CPU, with no download.

1. Generates the demo datasets (``tools/make_demo_data.py``; skipped when
   ``data/demo`` already holds them).
2. For Mask R-CNN on the shapes set (COCO layout) and UNet on the lesion set
   (ISIC-2018 layout), trains the stock and the HGWCaps config of
   ``configs/demo/`` with ``tools/train.py`` and evaluates the last
   checkpoint with ``tools/test.py``: the stock Runner, metrics and logs.
3. Prints one table (bbox / segm mAP from CocoMetric, mIoU / mDice from
   IoUMetric, parameters, times) and writes it to
   ``work_dirs/demo/summary.md``.

    python tools/demo.py [--work-dir work_dirs/demo] [--only seg|det]
"""
import argparse
import json
import os
import os.path as osp
import subprocess
import sys
import time

from mmhgw.config_utils import (NO_VALIDATION_OPTIONS, build_config_model,
                                load_offline_config)
from mmhgw.engine.work_dir import latest_checkpoint

ROOT = osp.dirname(osp.dirname(osp.abspath(__file__)))

DATA = osp.join(ROOT, 'data', 'demo')
JOBS = [
    dict(task='det', title='Mask R-CNN R-50 FPN, shapes (COCO layout)',
         stock='configs/demo/mask-rcnn_r50_fpn_demo-shapes.py',
         hgw='configs/demo/mask-rcnn_hgwcaps-r50_fpn_demo-shapes.py'),
    dict(task='seg', title='UNet s5-d16, lesions (ISIC-2018 layout)',
         stock='configs/demo/unet-s5-d16_fcn_demo-isic.py',
         hgw='configs/demo/unet-hgwcaps-s5-d16_fcn_demo-isic.py'),
]
METRICS = {
    'det': [('bbox mAP', 'coco/bbox_mAP'), ('segm mAP', 'coco/segm_mAP')],
    'seg': [('mIoU', 'mIoU'), ('mDice', 'mDice')],
}
#: Lines of the training log echoed to the console.
ECHO = ('Iter(train)', 'Iter(val) [', 'Saving checkpoint', 'bbox_mAP:',
        'segm_mAP:', 'mIoU')


def run_logged(cmd, log_path):
    """Run ``cmd``, keep its whole output in ``log_path``, echo progress."""
    start = time.perf_counter()
    with open(log_path, 'w') as log:
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)
        for line in proc.stdout:
            log.write(line)
            if any(key in line for key in ECHO):
                print('    ' + line.rstrip()[:220], flush=True)
        proc.wait()
    if proc.returncode:
        raise SystemExit(f'{" ".join(cmd)} failed ({proc.returncode}); '
                         f'see {log_path}')
    return time.perf_counter() - start


def ensure_data():
    from mmhgw.datasets.synthetic import DATA_VERSION
    marker = osp.join(DATA, '.complete')
    # Data of an older generator version is generated anew.
    if osp.exists(marker) and open(marker).read() == DATA_VERSION:
        print(f'demo data found in {DATA}')
        return
    subprocess.run([sys.executable, 'tools/make_demo_data.py', '--out', DATA],
                   cwd=ROOT, check=True)
    with open(marker, 'w') as f:
        f.write(DATA_VERSION)


def train_and_test(config, work_root):
    name = osp.splitext(osp.basename(config))[0]
    work = osp.join(work_root, name)
    os.makedirs(work, exist_ok=True)
    print(f'\n== {name}: training', flush=True)
    # The evaluation is tools/test.py's; none inside the training run.
    train_s = run_logged([
        sys.executable, 'tools/train.py', config, '--work-dir', work,
        '--cfg-options', *NO_VALIDATION_OPTIONS
    ], osp.join(work, 'train.out'))
    checkpoint = latest_checkpoint(work)
    print(f'== {name}: testing {osp.basename(checkpoint)}', flush=True)
    metrics_file = osp.join(work, 'metrics.json')
    test_s = run_logged([
        sys.executable, 'tools/test.py', config, checkpoint, '--work-dir',
        osp.join(work, 'test'), '--metrics-out', metrics_file
    ], osp.join(work, 'test.out'))
    with open(metrics_file) as f:
        metrics = json.load(f)
    cfg = load_offline_config(osp.join(ROOT, config))
    params = sum(p.numel()
                 for p in build_config_model(cfg, init=False).parameters())
    return dict(name=name, metrics=metrics, params=params, train_s=train_s,
                test_s=test_s, iters=cfg.train_cfg.max_iters)


def summary_table(results):
    lines = [
        '| task | model | params | train (s) | test (s) | metrics |',
        '|---|---|---|---|---|---|'
    ]
    for job, stock, hgw in results:
        for label, r in (('stock', stock), ('HGWCaps', hgw)):
            metrics = ', '.join(
                f'{name} {r["metrics"].get(key, float("nan")):.3f}'
                if job['task'] ==
                'det' else f'{name} {r["metrics"].get(key, float("nan")):.2f}'
                for name, key in METRICS[job['task']])
            ratio = '' if r is stock else \
                f' ({r["params"] / stock["params"]:.2f}x)'
            time_ratio = '' if r is stock else \
                f' ({r["train_s"] / stock["train_s"]:.1f}x)'
            lines.append(
                f'| {job["title"]} | {label} ({r["iters"]} iters) | '
                f'{r["params"] / 1e6:.2f}M{ratio} | {r["train_s"]:.0f}'
                f'{time_ratio} | {r["test_s"]:.0f} | {metrics} |')
    return '\n'.join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--work-dir', default=osp.join(ROOT, 'work_dirs',
                                                       'demo'))
    parser.add_argument('--only', choices=['det', 'seg'])
    args = parser.parse_args()
    start = time.perf_counter()
    ensure_data()
    results = []
    for job in JOBS:
        if args.only and job['task'] != args.only:
            continue
        stock = train_and_test(job['stock'], args.work_dir)
        hgw = train_and_test(job['hgw'], args.work_dir)
        results.append((job, stock, hgw))
    table = summary_table(results)
    total = time.perf_counter() - start
    text = (f'# mmhgw demo\n\nBuilt-in data, CPU, both models of a pair '
            f'with the same schedule, trained from scratch (no pretrained '
            f'weights offline). Total time {total / 60:.1f} min.\n\n'
            f'{table}\n')
    os.makedirs(args.work_dir, exist_ok=True)
    with open(osp.join(args.work_dir, 'summary.md'), 'w') as f:
        f.write(text)
    print('\n' + text)
    print(f'written to {osp.join(args.work_dir, "summary.md")}')


if __name__ == '__main__':
    main()
