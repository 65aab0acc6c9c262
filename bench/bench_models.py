"""HGWCaps-ResNet against the stock ResNet, side by side in one run.

Backbones (HGWCaps-R50/R101 vs ResNet-50/101, 224x224) and Mask R-CNN
(HGWCaps-R50 vs R-50 FPN, 800x1333, batch 1 or ``--batch``): parameters,
FLOPs with the HGW ops counted (:mod:`mmhgw.analysis.flops`), inference
latency, training step time and training-step peak memory, for the capsule
routing ``'hgw'``, the ``'uniform'`` routing (no optimal transport) and the
plain convolution (stock). The models are timed interleaved: ``--rounds``
rounds, in each every model in turn in a fresh process of its own; times
are medians over the rounds, ratios are taken against the stock model, and
the range of each round's ratio is reported beside them.

Peak memory: on a CPU, the growth of the resident set (RSS high-water mark)
over one training step, from the resident size just before it, measured in
a process of its own with ``MALLOC_MMAP_THRESHOLD_=65536``: glibc otherwise
keeps freed blocks below its (dynamic, up to 32 MiB) mmap threshold in its
heaps, and the RSS would measure the allocator's retention rather than live
tensors (timing runs leave glibc's default, which allocates faster). On a
GPU, ``torch.cuda.max_memory_allocated`` over the step.

    python bench/bench_models.py [--group backbones|mask-rcnn|all]
        [--device cuda] [--rounds 5] [--repeats 3] [--batch 1]
        [--routings hgw,uniform]
        [--no-write] [--json FILE]
"""
import argparse
import copy
import json
import os
import os.path as osp
import resource
import statistics
import subprocess
import sys
import time

import torch

from mmhgw.benchmarking import (markdown_table, median_time, save_json, sync,
                                write_section)

ROOT = osp.dirname(osp.dirname(osp.abspath(__file__)))

STOCK_MRCNN = 'mmdet::mask_rcnn/mask-rcnn_r50_fpn_1x_coco.py'
HGW_MRCNN = osp.join(ROOT,
                     'configs/mask_rcnn/mask-rcnn_hgwcaps-r50_fpn_1x_coco.py')

#: name -> (group, what to build). The first of each group is its baseline.
MODELS = {
    'ResNet-50': ('backbones', dict(depth=50)),
    'HGWCaps-R50 (hgw)': ('backbones', dict(depth=50, routing='hgw')),
    'HGWCaps-R50 (uniform)': ('backbones', dict(depth=50, routing='uniform')),
    'HGWCaps-R50 (hgw, torch reference)': ('backbones',
                                           dict(depth=50, routing='hgw',
                                                backend='torch')),
    'HGWCaps-R50 (hgw, 16 in-types)': ('backbones',
                                       dict(depth=50, routing='hgw',
                                            in_types=16)),
    'ResNet-101': ('backbones-101', dict(depth=101)),
    'HGWCaps-R101 (hgw)': ('backbones-101', dict(depth=101, routing='hgw')),
    'HGWCaps-R101 (uniform)': ('backbones-101',
                               dict(depth=101, routing='uniform')),
    'Mask R-CNN R-50': ('mask-rcnn', dict(config=STOCK_MRCNN)),
    'Mask R-CNN HGWCaps-R50 (hgw)': ('mask-rcnn',
                                     dict(config=HGW_MRCNN, routing='hgw')),
    'Mask R-CNN HGWCaps-R50 (uniform)': ('mask-rcnn',
                                         dict(config=HGW_MRCNN,
                                              routing='uniform')),
}
GROUPS = {
    'backbones': ('backbones', 'backbones-101'),
    'mask-rcnn': ('mask-rcnn', ),
}

BACKBONE_SHAPE, BACKBONE_TRAIN_BATCH = (224, 224), 2
DETECTOR_SHAPE = (800, 1333)


def resident_bytes():
    with open('/proc/self/statm') as f:
        return int(f.read().split()[1]) * os.sysconf('SC_PAGE_SIZE')


def peak_resident_bytes():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def build_backbone(spec):
    from mmengine.config import Config

    import mmhgw  # noqa: F401  (registers the backbones)
    from mmhgw.registry import DET_MODELS
    if 'routing' not in spec:
        cfg = dict(type='ResNet', depth=spec['depth'])
    else:
        hgw = Config.fromfile(osp.join(
            ROOT, 'configs/_base_/hgwcaps.py')).hgw_cfg.to_dict()
        hgw.update({
            k: spec[k]
            for k in ('routing', 'in_types', 'backend') if k in spec
        })
        cfg = dict(type='HGWCapsResNet', depth=spec['depth'], hgw_cfg=hgw)
    model = DET_MODELS.build(cfg)
    model.init_weights()
    return model


def build_detector(spec):
    from mmhgw.config_utils import build_config_model, load_offline_config
    cfg = load_offline_config(spec['config'])
    for key in ('routing', 'backend'):
        if key in spec:
            cfg.model.backbone.hgw_cfg[key] = spec[key]
    return build_config_model(cfg, init=True)


def detector_batch(device, batch=1):
    """``batch`` normalised 800x1333 images, each with three boxes and
    their masks."""
    from mmdet.structures import DetDataSample
    from mmdet.structures.mask import BitmapMasks
    from mmengine.structures import InstanceData
    H, W = DETECTOR_SHAPE
    gen = torch.Generator().manual_seed(0)
    image = torch.randn(batch, 3, H, W, generator=gen).to(device)
    boxes = torch.tensor([[100., 120., 400., 500.], [600., 50., 900., 300.],
                          [300., 400., 1200., 780.]])
    masks = torch.zeros(len(boxes), H, W, dtype=torch.uint8)
    for m, (x0, y0, x1, y1) in zip(masks, boxes.int().tolist()):
        m[y0:y1, x0:x1] = 1
    meta = dict(img_shape=(H, W), ori_shape=(H, W), pad_shape=(H, W),
                batch_input_shape=(H, W), scale_factor=(1.0, 1.0))
    sample = DetDataSample(metainfo=meta)
    sample.gt_instances = InstanceData(
        bboxes=boxes.to(device), labels=torch.tensor([1, 2, 3]).to(device),
        masks=BitmapMasks(masks.numpy(), H, W))
    return image, [copy.deepcopy(sample) for _ in range(batch)]


def worker(name, device, repeats, measure, batch=1):
    """Measure one model; returns a dict of plain numbers."""
    from mmhgw.analysis import count_flops
    from mmhgw.analysis.tracing import TensorModeModel
    group, spec = MODELS[name]
    torch.manual_seed(0)
    detector = group == 'mask-rcnn'
    model = (build_detector if detector else build_backbone)(spec).to(device)
    params = sum(p.numel() for p in model.parameters())
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-4, momentum=0.9)

    if detector:
        image, samples = detector_batch(device, batch)

        def loss():
            losses = model.loss(image, samples)
            return model.parse_losses(losses)[0]

        def infer():
            with torch.no_grad():
                return model.predict(image, samples)

        flop_model = TensorModeModel(model, 'mmdet', DETECTOR_SHAPE)
        flop_input = image[:1]
    else:
        train_x = torch.randn(BACKBONE_TRAIN_BATCH, 3, *BACKBONE_SHAPE,
                              device=device)
        flop_input = torch.randn(1, 3, *BACKBONE_SHAPE, device=device)

        def loss():
            return sum(o.float().square().mean() for o in model(train_x))

        def infer():
            with torch.no_grad():
                return model(flop_input)

        flop_model = model

    def train_step():
        optimizer.zero_grad(set_to_none=True)
        loss().backward()
        optimizer.step()

    model.train()
    if measure == 'memory':
        if torch.device(device).type == 'cuda':
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            base = torch.cuda.memory_allocated()
            train_step()
            torch.cuda.synchronize()
            peak = torch.cuda.max_memory_allocated() - base
        else:
            base = resident_bytes()
            train_step()
            peak = peak_resident_bytes() - base
        return dict(name=name, peak_bytes=peak)

    train_time = median_time(train_step, device, repeats, warmup=1)
    model.eval()
    infer_time = median_time(infer, device, repeats, warmup=1)
    start = time.perf_counter()
    flops = count_flops(flop_model, (flop_input, ))
    sync(device)
    return dict(name=name, group=group, params=params, flops=flops.total,
                products=flops.products, hgw_flops=flops.hgw,
                infer_s=infer_time, train_s=train_time,
                trace_s=time.perf_counter() - start)


def run_worker(name, device, repeats, measure, batch=1):
    cmd = [
        sys.executable,
        osp.abspath(__file__), '--worker', name, '--measure', measure,
        '--device', device, '--repeats',
        str(repeats), '--batch',
        str(batch)
    ]
    env = dict(os.environ)
    if measure == 'memory':
        env['MALLOC_MMAP_THRESHOLD_'] = '65536'
    done = subprocess.run(cmd, capture_output=True, text=True, env=env)
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith('{')]
    if done.returncode or not lines:
        sys.stderr.write(done.stderr[-4000:])
        raise RuntimeError(f'measuring {name!r} ({measure}) failed '
                           f'(exit {done.returncode})')
    return json.loads(lines[-1])


def measure_group(names, device, repeats, rounds, batch=1):
    """Time ``names`` (each group's stock model first) interleaved: in each
    of ``rounds`` rounds every model in turn, in a fresh process, so that
    a slow phase of the machine affects all of them alike. Per model: the
    median over rounds of its times, and the range over rounds of its
    ratio to the stock model of the same round; then its memory."""
    per_round = []
    for r in range(rounds):
        print(f'round {r + 1} of {rounds}', flush=True)
        per_round.append([
            run_worker(name, device, repeats, 'time', batch) for name in names
        ])
    groups = [r['group'] for r in per_round[0]]
    results = []
    for i, name in enumerate(names):
        result = dict(per_round[0][i])
        stock = groups.index(groups[i])  # the stock model of its group
        for key in ('infer_s', 'train_s'):
            times = [runs[i][key] for runs in per_round]
            result[key] = statistics.median(times)
            result[key + '_ratios'] = [
                runs[i][key] / runs[stock][key] for runs in per_round
            ]
        result.update(run_worker(name, device, repeats, 'memory', batch))
        results.append(result)
    return results


def ratio(value, base):
    return f'{value / base:.2f}x' if base else ''


def ratio_ranges(result):
    """'inference / train' ranges of the ratios over rounds; '' for one
    round (or a result from before rounds)."""
    ratios = [result.get(k, []) for k in ('infer_s_ratios', 'train_s_ratios')]
    if min(len(r) for r in ratios) < 2:
        return ''
    return ' / '.join(f'{min(r):.2f}-{max(r):.2f}x' for r in ratios)


def table(results):
    header = [
        'model', 'params', 'FLOPs (all ops)', 'of which products',
        'in HGWCaps', 'inference', 'train step', 'train peak mem',
        'inference / train ratio over rounds'
    ]
    rows, base = [], None
    for r in results:
        base = r if base is None or r['group'] != base['group'] else base
        rows.append([
            r['name'],
            f"{r['params'] / 1e6:.1f}M ({ratio(r['params'], base['params'])})",
            f"{r['flops'] / 1e9:.2f}G ({ratio(r['flops'], base['flops'])})",
            f"{r['products'] / 1e9:.2f}G",
            f"{r['hgw_flops'] / 1e9:.2f}G",
            f"{r['infer_s'] * 1e3:.0f} ms "
            f"({ratio(r['infer_s'], base['infer_s'])})",
            f"{r['train_s'] * 1e3:.0f} ms "
            f"({ratio(r['train_s'], base['train_s'])})",
            f"{r['peak_bytes'] / 2**20:.0f} MiB "
            f"({ratio(r['peak_bytes'], base['peak_bytes'])})",
            ratio_ranges(r) if r is not base else '',
        ])
    return markdown_table(header, rows)


def section(group_name, results, repeats, rounds, batch, device):
    """``(key, title, body)`` of a group's report section."""
    device = torch.device(device).type
    sections = {
        'backbones': ('models-backbones', 'HGWCaps-ResNet vs ResNet '
                      'backbones, 224x224 (train: batch 2)'),
        'mask-rcnn': ('models-mask-rcnn' + (f'-b{batch}' if batch > 1 else ''),
                      'Mask R-CNN '
                      f'HGWCaps-R50 vs R-50 FPN, 800x1333, batch {batch}'),
    }
    images = {
        'backbones': 'inference and FLOPs on one image',
        'mask-rcnn': f'inference on the batch of {batch}, FLOPs '
        'on one image'
    }
    key, title = sections[group_name]
    return (f'{key}-{device}', f'{title} ({device})',
            table(results) + f'\n\nTimes: the median over {rounds} '
            f'interleaved rounds (every model in turn, each in a fresh '
            f'process) of the median of {repeats} runs; ratios to the stock '
            f'model, whose range over the rounds is the last column; '
            f'{images[group_name]}.')


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--group', default='all',
                        choices=sorted(GROUPS) + ['all'])
    parser.add_argument('--device', default='cpu')
    parser.add_argument('--repeats', type=int, default=3,
                        help='timed runs per model and round')
    parser.add_argument(
        '--rounds', type=int, default=5,
        help='interleaved rounds: every model in turn, each round')
    parser.add_argument(
        '--batch', type=int, default=1,
        help='images per Mask R-CNN batch (backbones: '
        f'{BACKBONE_TRAIN_BATCH} in training, 1 in inference)')
    parser.add_argument(
        '--routings', default='hgw,uniform',
        help='comma-separated routings of the HGWCaps models '
        'to measure beside the stock one')
    parser.add_argument('--no-write', action='store_true')
    parser.add_argument('--json', help='also write the measurements here')
    parser.add_argument('--worker', help=argparse.SUPPRESS)
    parser.add_argument('--measure', default='time',
                        choices=['time', 'memory'], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.repeats < 1:
        parser.error('--repeats must be >= 1')
    if args.rounds < 1:
        parser.error('--rounds must be >= 1')
    if args.batch < 1:
        parser.error('--batch must be >= 1')
    routings = args.routings.split(',')
    known = {
        spec['routing']
        for _, spec in MODELS.values() if 'routing' in spec
    }
    if not set(routings) <= known:
        parser.error(f'--routings: expected some of {sorted(known)}, got '
                     f'{args.routings!r}')
    if args.worker:
        print(
            json.dumps(
                worker(args.worker, args.device, args.repeats, args.measure,
                       args.batch)))
        return

    groups = {}
    for group_name in (GROUPS if args.group == 'all' else [args.group]):
        names = [
            name for name, (group, spec) in MODELS.items()
            if group in GROUPS[group_name]
            and spec.get('routing', routings[0]) in routings
        ]
        batch = args.batch if group_name == 'mask-rcnn' else 1
        print(f'measuring {", ".join(names)} ...', flush=True)
        results = measure_group(names, args.device, args.repeats, args.rounds,
                                batch)
        groups[group_name] = results
        key, title, body = section(group_name, results, args.repeats,
                                   args.rounds, args.batch, args.device)
        print(body)
        if not args.no_write:
            write_section(key, title, body, device=args.device)
    if args.json:
        save_json(args.json, args.device, groups=groups, repeats=args.repeats,
                  rounds=args.rounds, batch=args.batch)


if __name__ == '__main__':
    main()
