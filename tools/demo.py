"""Quick end-to-end check on a machine with no data and no GPU.

Builds the stock Mask R-CNN R-50 FPN and its HGWCaps variant from their
config files (the HGW one carries ``custom_imports = [mmhgw]``),
runs inference on a generated image, and prints parameters, latency and the
detections side by side. Weights are random (no pretrained weights can be
fetched here), so the detections only show that the pipeline runs.
"""
import argparse
import os.path as osp
import time

import numpy as np
import torch
from mmengine.registry import init_default_scope

from mmhgw.testing import load_config

ROOT = osp.dirname(osp.dirname(osp.abspath(__file__)))
CONFIGS = {
    'stock R-50': 'mmdet::mask_rcnn/mask-rcnn_r50_fpn_1x_coco.py',
    'HGWCaps R-50 (stages 3-4)':
    osp.join(ROOT, 'configs/mask_rcnn/mask-rcnn_hgwcaps-r50_fpn_1x_coco.py'),
}


def generated_image(height, width, seed=0):
    """A textured background with a few filled shapes (BGR, uint8)."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[:height, :width]
    img = np.stack([(xx * 0.3 + rng.normal(0, 8, (height, width))) % 256,
                    (yy * 0.4 + rng.normal(0, 8, (height, width))) % 256,
                    np.full((height, width), 90.0)], -1)
    for _ in range(4):
        cy, cx = rng.integers(0, height), rng.integers(0, width)
        r = rng.integers(min(height, width) // 12, min(height, width) // 5)
        mask = (yy - cy)**2 + (xx - cx)**2 < r**2
        img[mask] = rng.integers(0, 256, 3)
    return img.astype(np.uint8)


def run(name, path, img, score_thr):
    from mmdet.apis import inference_detector, init_detector
    cfg = load_config(path)
    cfg.model.backbone.init_cfg = None  # no network: random weights
    init_default_scope(cfg.get('default_scope', 'mmdet'))
    torch.manual_seed(0)
    model = init_detector(cfg, checkpoint=None, device='cpu')
    inference_detector(model, img)  # warm-up
    start = time.perf_counter()
    result = inference_detector(model, img)
    seconds = time.perf_counter() - start
    inst = result.pred_instances
    keep = inst.scores > score_thr
    return dict(
        name=name,
        params=sum(p.numel() for p in model.parameters()),
        backbone=sum(p.numel() for p in model.backbone.parameters()),
        seconds=seconds,
        detections=int(keep.sum()),
        masks=tuple(inst.masks.shape) if 'masks' in inst else None)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--size', type=int, nargs=2, default=(320, 480),
                        metavar=('H', 'W'), help='generated image size')
    parser.add_argument('--score-thr', type=float, default=0.05)
    args = parser.parse_args()
    torch.set_num_threads(max(1, torch.get_num_threads()))
    img = generated_image(*args.size)
    rows = [run(name, path, img, args.score_thr)
            for name, path in CONFIGS.items()]
    base = rows[0]
    print(f'\nMask R-CNN inference on a generated {args.size[0]}x'
          f'{args.size[1]} image, CPU, random weights\n')
    print(f'{"model":28s} {"params":>12s} {"backbone":>12s} '
          f'{"latency":>10s} {"dets>thr":>9s}  masks')
    for r in rows:
        print(f'{r["name"]:28s} {r["params"] / 1e6:9.2f}M '
              f'({r["params"] / base["params"]:.2f}) '
              f'{r["backbone"] / 1e6:6.2f}M ({r["backbone"] / base["backbone"]:.2f}) '
              f'{r["seconds"]:7.2f}s ({r["seconds"] / base["seconds"]:.1f}x) '
              f'{r["detections"]:6d}  {r["masks"]}')


if __name__ == '__main__':
    main()
