"""A built-in image classification set, generated from a seed in seconds.

:func:`make_shape_classification` draws one filled shape per image (the
classes of the built-in detection set: circle, square, triangle, star) with
random size, position, rotation and colour on a textured background, and
lays the images out as MMPretrain's ``CustomDataset`` reads them with an
annotation file (ImageNet style)::

    out_dir/train/<class>/<name>.png    out_dir/val/<class>/<name>.png
    out_dir/meta/train.txt              out_dir/meta/val.txt
    out_dir/meta/classes.txt

``meta/<split>.txt`` lines are ``<class>/<name>.png <label>``. The images are
also the default unlabeled set of ``tools/model_converters``.
"""
import os
import os.path as osp
from typing import Sequence

import cv2
import numpy as np

from .synthetic import SHAPES, _progress, _shape_polygon, _texture

__all__ = ['make_shape_classification']


def make_shape_classification(out_dir: str, num_train: int = 200,
                              num_val: int = 50,
                              size: Sequence[int] = (32, 32), seed: int = 0,
                              classes: Sequence[str] = SHAPES) -> dict:
    """Write the set under ``out_dir``; returns its metainfo
    (``dict(classes=...)``). Classes are balanced (image ``i`` has class
    ``i % len(classes)``), so every class appears in a split of
    ``len(classes)`` images or more."""
    height, width = size
    os.makedirs(osp.join(out_dir, 'meta'), exist_ok=True)
    with open(osp.join(out_dir, 'meta', 'classes.txt'), 'w') as f:
        f.write('\n'.join(classes) + '\n')
    for split, count in (('train', num_train), ('val', num_val)):
        rng = np.random.default_rng([seed, 6 if split == 'train' else 7])
        for name in classes:
            os.makedirs(osp.join(out_dir, split, name), exist_ok=True)
        lines = []
        step = _progress(count, f'cls {split}')
        for idx in range(count):
            label = idx % len(classes)
            img = _texture(rng, height, width)
            # Large enough to be told apart at 32x32, small enough to move.
            radius = rng.uniform(0.25, 0.42) * min(height, width)
            cx = rng.uniform(radius, width - radius)
            cy = rng.uniform(radius, height - radius)
            poly = _shape_polygon(
                classes[label] if classes[label] in SHAPES else
                SHAPES[label % len(SHAPES)], cx, cy, radius,
                rng.uniform(0, 2 * np.pi))
            mask = np.zeros((height, width), np.uint8)
            cv2.fillPoly(mask, [np.round(poly).astype(np.int32)], 1)
            img[mask > 0] = rng.uniform(0, 255, 3).astype(np.uint8)
            rel = f'{classes[label]}/{split}_{idx:06d}.png'
            cv2.imwrite(osp.join(out_dir, split, rel), img)
            lines.append(f'{rel} {label}')
            step()
        with open(osp.join(out_dir, 'meta', f'{split}.txt'), 'w') as f:
            f.write('\n'.join(lines) + '\n')
    return dict(classes=tuple(classes))
