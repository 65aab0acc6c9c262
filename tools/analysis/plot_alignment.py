"""Alignment plots in the manner of the paper's Fig. 4.

For one input image and one HGW capsule layer, across training stages (one
checkpoint each): histograms, over the layer's locations, of the HGW
distance from the input to each output capsule type's subcapsule; and, for
the last checkpoint, the transport plan of the best-aligned (location,
type) pair as a heat map. Writes two PNGs.

    python tools/analysis/plot_alignment.py CONFIG CKPT [CKPT ...] \
        --image IMG [--layer NAME] [--types 4] [--out-dir DIR]
"""
import argparse
import os
import os.path as osp

import matplotlib
import torch

from mmhgw.config_utils import (build_config_model, check_files,
                                load_offline_config)
from mmhgw.models import HGWCaps

matplotlib.use('Agg')
import matplotlib.pyplot as plt  # noqa: E402


def test_pipeline(cfg):
    """The config's test pipeline without annotation loading."""
    from mmcv.transforms import Compose
    steps = [
        t for t in cfg.test_dataloader.dataset.pipeline
        if 'Annotations' not in t['type']
    ]
    return Compose(steps)


def capture_routing(cfg, checkpoint, image, layer_name=None):
    """Distances [L, N], plans [L, N, V_p, V_q] and the layer's name."""
    from mmhgw.engine import load_fitting_weights
    model = build_config_model(cfg)
    load_fitting_weights(model, checkpoint)
    model.eval()
    layers = {n: m for n, m in model.named_modules() if isinstance(m, HGWCaps)}
    if not layers:
        raise SystemExit(f'{cfg.filename} has no HGWCaps layer')
    if layer_name is None:
        layer_name = list(layers)[-1]
    if layer_name not in layers:
        raise SystemExit(f'--layer {layer_name!r} is not an HGWCaps layer; '
                         f'choose from {list(layers)}')
    layer, seen = layers[layer_name], {}
    handle = layer.register_forward_pre_hook(
        lambda module, args: seen.setdefault('x', args[0]))
    data = test_pipeline(cfg)(dict(img_path=image))
    batch = model.data_preprocessor(
        dict(inputs=[data['inputs']], data_samples=[data['data_samples']]),
        False)
    with torch.no_grad():
        model(batch['inputs'], batch['data_samples'], mode='tensor')
        handle.remove()
        routed = layer.route(seen['x'][:1])
    return routed['distance'][0], routed['plan'][0], layer_name


def plot(stages, out_dir, num_types, layer_name):
    os.makedirs(out_dir, exist_ok=True)
    last_dist = stages[-1][1]
    # The types the input aligns with best at the end, as the paper's
    # columns of class capsules.
    types = last_dist.mean(0).argsort()[:num_types].tolist()
    lo = min(float(d[:, types].min()) for _, d, _ in stages)
    hi = max(float(d[:, types].max()) for _, d, _ in stages)
    fig, axes = plt.subplots(len(stages), len(types), squeeze=False,
                             figsize=(2.6 * len(types), 1.9 * len(stages)),
                             sharex=True)
    for row, (label, dist, _) in enumerate(stages):
        for col, t in enumerate(types):
            ax = axes[row][col]
            ax.hist(dist[:, t].numpy(), bins=30, range=(lo, hi),
                    color='tab:blue' if col else 'tab:red')
            if row == 0:
                ax.set_title(f'capsule type {t}', fontsize=9)
            if col == 0:
                ax.set_ylabel(label, fontsize=8)
            ax.tick_params(labelsize=7)
    for ax in axes[-1]:
        ax.set_xlabel('HGW distance', fontsize=8)
    fig.suptitle(
        f'{layer_name}: distances of the input to each capsule '
        'type, per training stage', fontsize=10)
    fig.tight_layout()
    hist_path = osp.join(out_dir, 'alignment_histograms.png')
    fig.savefig(hist_path, dpi=110)
    plt.close(fig)

    dist, plan = stages[-1][1], stages[-1][2]
    loc, t = divmod(int(dist.argmin()), dist.shape[1])
    fig, ax = plt.subplots(figsize=(4.2, 5))
    im = ax.imshow(plan[loc, t].numpy(), cmap='viridis', aspect='auto')
    ax.set_xlabel('subcapsule part (V_q)')
    ax.set_ylabel('input capsule type (V_p)')
    ax.set_title(
        f'transport plan, location {loc}, type {t}\n'
        f'distance {float(dist[loc, t]):.4f}', fontsize=9)
    fig.colorbar(im, ax=ax)
    fig.tight_layout()
    plan_path = osp.join(out_dir, 'transport_plan.png')
    fig.savefig(plan_path, dpi=110)
    plt.close(fig)
    return hist_path, plan_path


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('config')
    parser.add_argument('checkpoints', nargs='+',
                        help='one checkpoint per training stage, in order')
    parser.add_argument('--image', required=True)
    parser.add_argument('--layer', help='HGWCaps module name (default: the '
                        'last one)')
    parser.add_argument('--types', type=int, default=4,
                        help='capsule types to show (best aligned first)')
    parser.add_argument('--out-dir', default='work_dirs/alignment')
    args = parser.parse_args()
    # Every input named before a model is built: a wrong path otherwise
    # surfaces after the first checkpoints' runs, as a traceback.
    check_files(parser,
                [('config', args.config),
                 ('--image', args.image)] + [('checkpoint', c)
                                             for c in args.checkpoints])
    if args.types < 1:
        parser.error(f'--types must be >= 1, got {args.types}')
    cfg = load_offline_config(args.config)
    stages, layer = [], args.layer
    for ckpt in args.checkpoints:
        dist, plan, layer = capture_routing(cfg, ckpt, args.image, layer)
        stages.append((osp.splitext(osp.basename(ckpt))[0], dist, plan))
    for path in plot(stages, args.out_dir, args.types, layer):
        print(f'wrote {path}')


if __name__ == '__main__':
    main()
