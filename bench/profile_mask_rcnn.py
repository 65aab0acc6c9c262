"""Where the time of an HGWCaps Mask R-CNN forward goes (inference, 800x1333).

Two views of one ``predict`` on one image, after a warm-up call:

1. By part of the network, from wall-clock timers around the HGW routing
   op (``hgw_routing``), the capsule layers' grouped convolution, the rest of
   the capsule layers, the rest of the backbone, and neck + heads +
   post-processing.
2. By kind of operator, from ``torch.profiler`` self times: matrix
   products, convolutions, ``exp``/``log``, other elementwise ops,
   reductions, data movement.

    python bench/profile_mask_rcnn.py [--device cuda] [--no-write]
"""
import argparse
import time
from collections import defaultdict

import torch
# bench_models: the script beside this one (a script's folder is on the
# import path).
from bench_models import HGW_MRCNN, STOCK_MRCNN, build_detector, detector_batch

from mmhgw.benchmarking import markdown_table, sync, write_section

#: aten op name -> kind, by first matching substring.
OP_KINDS = (
    ('conv', 'convolution'),
    ('mm', 'matrix products'),
    ('einsum', 'matrix products'),
    ('matmul', 'matrix products'),
    ('linear', 'matrix products'),
    ('exp', 'exp / log'),
    ('log', 'exp / log'),
    ('sum', 'reductions'),
    ('amax', 'reductions'),
    ('max', 'reductions'),
    ('min', 'reductions'),
    ('mean', 'reductions'),
    ('copy', 'data movement'),
    ('cat', 'data movement'),
    ('clone', 'data movement'),
    ('contiguous', 'data movement'),
    ('index', 'data movement'),
    ('fill', 'data movement'),
    ('empty', 'data movement'),
    ('add', 'other elementwise'),
    ('sub', 'other elementwise'),
    ('mul', 'other elementwise'),
    ('div', 'other elementwise'),
    ('clamp', 'other elementwise'),
    ('neg', 'other elementwise'),
    ('pow', 'other elementwise'),
    ('sqrt', 'other elementwise'),
    ('reciprocal', 'other elementwise'),
    ('relu', 'other elementwise'),
    ('batch_norm', 'other elementwise'),
)


def op_kind(name):
    name = name.split('::')[-1]
    return next((kind for key, kind in OP_KINDS if key in name), 'other')


class Timers:
    """Accumulated wall time of code regions, device-synchronised."""

    def __init__(self, device):
        self.device = device
        self.total = defaultdict(float)
        self.open = {}

    def start(self, key):
        sync(self.device)
        self.open[key] = time.perf_counter()

    def stop(self, key):
        sync(self.device)
        self.total[key] += time.perf_counter() - self.open.pop(key)

    def around_module(self, module, key):
        module.register_forward_pre_hook(lambda *_: self.start(key))
        module.register_forward_hook(lambda *_: self.stop(key))

    def around_function(self, owner, name, key):
        """Time calls of ``owner.name``; returns a function restoring it."""
        fn = getattr(owner, name)

        def timed(*args, **kwargs):
            self.start(key)
            try:
                return fn(*args, **kwargs)
            finally:
                self.stop(key)

        setattr(owner, name, timed)
        return lambda: setattr(owner, name, fn)


def by_part(config, device):
    """Seconds per part of one predict call, and its total."""
    from mmhgw.models.layers import HGWCaps, hgw_caps
    model = build_detector(dict(config=config)).to(device)
    model.eval()
    image, samples = detector_batch(device)
    timers = Timers(device)
    timers.around_module(model.backbone, 'backbone')
    for module in model.backbone.modules():
        if isinstance(module, HGWCaps):
            timers.around_module(module, 'capsule layers')
            timers.around_module(module.embed, 'grouped conv')
    restore = timers.around_function(hgw_caps, 'hgw_routing', 'solver')
    try:
        with torch.no_grad():
            model.predict(image, samples)  # warm-up
            timers.total.clear()
            timers.start('predict')
            model.predict(image, samples)
            timers.stop('predict')
    finally:
        restore()
    t = timers.total
    parts = [
        ('HGW routing op (hgw_routing: the plans and their distances)',
         t['solver']),
        ('capsule grouped conv (embed)', t['grouped conv']),
        ('capsule layer, rest (structures, factors, activations)',
         t['capsule layers'] - t['solver'] - t['grouped conv']),
        ('backbone, rest (stock convs, BN, ReLU)',
         t['backbone'] - t['capsule layers']),
        ('neck, RPN, RoI heads, post-processing',
         t['predict'] - t['backbone']),
    ]
    return parts, t['predict'], model, image, samples


def by_op_kind(model, image, samples, device):
    from torch.profiler import ProfilerActivity, profile
    activities = [ProfilerActivity.CPU]
    if torch.device(device).type == 'cuda':
        activities.append(ProfilerActivity.CUDA)
    with torch.no_grad(), profile(activities=activities) as prof:
        model.predict(image, samples)
    kinds, ops = defaultdict(float), []
    use_cuda = torch.device(device).type == 'cuda'
    for event in prof.key_averages():
        if not event.key.startswith('aten::'):
            continue
        self_us = (event.self_device_time_total
                   if use_cuda else event.self_cpu_time_total)
        kinds[op_kind(event.key)] += self_us
        ops.append((self_us, event.key, event.count))
    return kinds, sorted(ops, reverse=True)[:10]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--device', default='cpu')
    parser.add_argument('--no-write', action='store_true')
    args = parser.parse_args()
    torch.manual_seed(0)

    stock_parts, stock_total, *_ = by_part(STOCK_MRCNN, args.device)
    parts, total, model, image, samples = by_part(HGW_MRCNN, args.device)
    rows = [[name, f'{sec:.2f} s', f'{100 * sec / total:.0f}%']
            for name, sec in parts]
    rows.append(['**total predict**', f'{total:.2f} s', '100%'])
    rows.append([
        'stock R-50 predict (same run)', f'{stock_total:.2f} s',
        f'HGW / stock: {total / stock_total:.1f}x'
    ])
    part_table = markdown_table(['part', 'time', 'share'], rows)

    kinds, top = by_op_kind(model, image, samples, args.device)
    all_us = sum(kinds.values())
    kind_table = markdown_table(
        ['operator kind', 'self time', 'share'],
        [[k, f'{us / 1e6:.2f} s', f'{100 * us / all_us:.0f}%']
         for k, us in sorted(kinds.items(), key=lambda kv: -kv[1])])
    top_table = markdown_table(['op', 'self time', 'calls'],
                               [[name, f'{us / 1e6:.2f} s', count]
                                for us, name, count in top])
    text = (f'By part (wall clock, one predict after a warm-up):\n\n'
            f'{part_table}\n\nBy operator kind (profiler self time, '
            f'aten ops only; the profiler adds overhead):\n\n{kind_table}'
            f'\n\nTop operators:\n\n{top_table}')
    print(text)
    if not args.no_write:
        device = torch.device(args.device).type
        write_section(
            f'profile-mask-rcnn-{device}',
            f'Profile: Mask R-CNN HGWCaps-R50 inference, '
            f'800x1333 ({device})', text, device=args.device)


if __name__ == '__main__':
    main()
