"""Built-in datasets, generated deterministically from a seed in seconds.

Each is laid out exactly as its real counterpart, so the stock dataset
classes and metrics read it unchanged:

- :func:`make_coco_instances`: COCO instance segmentation (``train2017/``,
  ``val2017/``, ``annotations/instances_{train,val}2017.json`` with RLE
  masks) of filled shapes on textured backgrounds, with scale and rotation
  variation and occlusion (a later shape hides what it covers).
- :func:`make_voc_semantic`: Pascal VOC 2012 semantic segmentation
  (``VOCdevkit/VOC2012/{JPEGImages,SegmentationClass,ImageSets/Segmentation}``,
  palette PNGs with 255 object borders, as VOC's).
- :func:`make_isic_lesions`: ISIC-2018 Task 1 as arranged by
  ``tools/dataset_converters/isic2018.py`` (0/255 masks), hard by default
  (low-contrast lesions, distractors), or easy.
- :func:`make_isic_arrangements`: the same layout, for a task where only
  the arrangement of parts decides the label: every object is the same two
  bars, joined as a T (foreground) or as an L (background);
  :func:`make_arrangement_patches` the same objects one to a patch, as
  in-memory arrays of a T-or-L classification task.
"""
import json
import math
import os
import os.path as osp
from typing import Callable, Optional, Sequence, Tuple

import cv2
import numpy as np

from mmhgw.arg_checks import check_choice

#: Shape classes of the generated detection set.
SHAPES = ('circle', 'square', 'triangle', 'star')

#: Changes whenever the generators draw different data from the same seed,
#: so that tools can tell generated sets of an older version.
DATA_VERSION = '2'


def _progress(total: int, label: str) -> Callable[[], None]:
    done = [0]

    def step():
        done[0] += 1
        width = 30
        filled = width * done[0] // total
        if filled == width * (done[0] - 1) // total and done[0] < total:
            return
        print(
            f'\r{label:12s} [{"#" * filled}{"." * (width - filled)}] '
            f'{done[0]}/{total}', end='\n' if done[0] == total else '',
            flush=True)

    return step


def _texture(rng: np.random.Generator, height: int, width: int) -> np.ndarray:
    """A smooth random colour field with grain (BGR, uint8)."""
    coarse = rng.uniform(40, 215, (4, 4, 3)).astype(np.float32)
    img = cv2.resize(coarse, (width, height), interpolation=cv2.INTER_CUBIC)
    yy, xx = np.mgrid[:height, :width].astype(np.float32)
    stripes = 12 * np.sin(xx / rng.uniform(3, 9) + yy / rng.uniform(5, 15))
    img += stripes[..., None] + rng.normal(0, 6, (height, width, 3))
    return np.clip(img, 0, 255).astype(np.uint8)


def _shape_polygon(kind: str, cx: float, cy: float, radius: float,
                   angle: float) -> np.ndarray:
    if kind == 'circle':
        t = np.linspace(0, 2 * np.pi, 32, endpoint=False)
        radii = np.full_like(t, radius)
    elif kind == 'square':
        t = np.arange(4) * np.pi / 2 + np.pi / 4
        radii = np.full_like(t, radius)
    elif kind == 'triangle':
        t = np.arange(3) * 2 * np.pi / 3
        radii = np.full_like(t, radius)
    elif kind == 'star':
        t = np.arange(10) * np.pi / 5
        radii = np.where(np.arange(10) % 2 == 0, radius, radius * 0.45)
    else:
        raise ValueError(f'unknown shape {kind!r}, expected one of {SHAPES}')
    t = t + angle
    return np.stack([cx + radii * np.cos(t), cy + radii * np.sin(t)], -1)


def _draw_shapes(rng, height, width, kinds, max_shapes, min_area):
    """Image plus per-instance (class index, mask) after occlusion."""
    img = _texture(rng, height, width)
    instances = []
    for _ in range(rng.integers(1, max_shapes + 1)):
        label = int(rng.integers(len(kinds)))
        radius = rng.uniform(0.08, 0.22) * min(height, width)
        cx = rng.uniform(radius, width - radius)
        cy = rng.uniform(radius, height - radius)
        poly = _shape_polygon(kinds[label], cx, cy, radius,
                              rng.uniform(0, 2 * np.pi))
        mask = np.zeros((height, width), np.uint8)
        cv2.fillPoly(mask, [np.round(poly).astype(np.int32)], 1)
        colour = rng.uniform(0, 255, 3)
        shade = rng.uniform(0.8, 1.2, (height, width, 1))
        body = np.clip(colour * shade, 0, 255).astype(np.uint8)
        img[mask > 0] = body[mask > 0]
        for _, other in instances:  # occlusion: the new shape hides
            other[mask > 0] = 0
        instances.append((label, mask))
    kept = [(label, m) for label, m in instances if m.sum() >= min_area]
    return img, kept


def make_coco_instances(out_dir: str, num_train: int = 200, num_val: int = 50,
                        size: Sequence[int] = (128, 160), seed: int = 0,
                        max_shapes: int = 4,
                        classes: Sequence[str] = SHAPES) -> dict:
    """COCO-format instance segmentation of shapes; returns its metainfo."""
    from pycocotools import mask as mask_utils
    height, width = size
    categories = [dict(id=i + 1, name=name) for i, name in enumerate(classes)]
    for split, count in (('train2017', num_train), ('val2017', num_val)):
        rng = np.random.default_rng([seed, 0 if split == 'train2017' else 1])
        os.makedirs(osp.join(out_dir, split), exist_ok=True)
        images, annotations = [], []
        step = _progress(count, f'coco {split[:-4]}')
        for idx in range(count):
            img, instances = _draw_shapes(rng, height, width, classes,
                                          max_shapes, min_area=30)
            name = f'{idx:012d}.jpg'
            cv2.imwrite(osp.join(out_dir, split, name), img,
                        [cv2.IMWRITE_JPEG_QUALITY, 95])
            images.append(
                dict(id=idx, file_name=name, height=height, width=width))
            for label, mask in instances:
                rle = mask_utils.encode(np.asfortranarray(mask))
                x, y, w, h = mask_utils.toBbox(rle).tolist()
                rle['counts'] = rle['counts'].decode('ascii')
                annotations.append(
                    dict(id=len(annotations) + 1, image_id=idx,
                         category_id=label + 1, segmentation=rle,
                         area=float(mask.sum()), bbox=[x, y, w, h], iscrowd=0))
            step()
        os.makedirs(osp.join(out_dir, 'annotations'), exist_ok=True)
        with open(osp.join(out_dir, 'annotations', f'instances_{split}.json'),
                  'w') as f:
            json.dump(
                dict(images=images, annotations=annotations,
                     categories=categories), f)
    return dict(classes=tuple(classes))


#: VOC's colour palette for the first classes (background, aeroplane, ...).
def _voc_palette() -> list:
    palette = []
    for i in range(256):
        r = g = b = 0
        c = i
        for j in range(8):
            r |= ((c >> 0) & 1) << (7 - j)
            g |= ((c >> 1) & 1) << (7 - j)
            b |= ((c >> 2) & 1) << (7 - j)
            c >>= 3
        palette += [r, g, b]
    return palette


def make_voc_semantic(
        out_dir: str,
        num_train: int = 100,
        num_val: int = 30,
        size: Sequence[int] = (128, 160),
        seed: int = 0,
        class_ids: Sequence[int] = (1, 8, 12, 15),
) -> None:
    """Pascal VOC 2012 layout: shapes labelled with VOC class ids
    (default aeroplane, cat, dog, person), 255 borders."""
    from PIL import Image
    height, width = size
    root = osp.join(out_dir, 'VOCdevkit', 'VOC2012')
    for sub in ('JPEGImages', 'SegmentationClass', 'ImageSets/Segmentation'):
        os.makedirs(osp.join(root, sub), exist_ok=True)
    palette = _voc_palette()
    kinds = SHAPES[:len(class_ids)] if len(class_ids) <= len(SHAPES) else \
        [SHAPES[i % len(SHAPES)] for i in range(len(class_ids))]
    for split, count in (('train', num_train), ('val', num_val)):
        rng = np.random.default_rng([seed, 2 if split == 'train' else 3])
        names = []
        step = _progress(count, f'voc {split}')
        for idx in range(count):
            img, instances = _draw_shapes(rng, height, width, kinds, 3,
                                          min_area=1)
            label = np.zeros((height, width), np.uint8)
            for cls, mask in instances:
                border = cv2.morphologyEx(mask, cv2.MORPH_GRADIENT,
                                          np.ones((3, 3), np.uint8))
                label[mask > 0] = class_ids[cls]
                label[border > 0] = 255
            name = f'2007_{split}{idx:06d}'
            names.append(name)
            cv2.imwrite(osp.join(root, 'JPEGImages', name + '.jpg'), img)
            png = Image.fromarray(label, mode='P')
            png.putpalette(palette)
            png.save(osp.join(root, 'SegmentationClass', name + '.png'))
            step()
        with open(osp.join(root, 'ImageSets', 'Segmentation', f'{split}.txt'),
                  'w') as f:
            f.write('\n'.join(names) + '\n')


#: Difficulty levels of :func:`make_isic_lesions`.
LESION_LEVELS = ('easy', 'hard')


def _smooth_field(rng: np.random.Generator, height: int, width: int,
                  cells: int, channels: int) -> np.ndarray:
    """A smooth random field in [-1, 1]: ``cells x cells`` random values
    interpolated to the image size."""
    coarse = rng.uniform(-1, 1, (cells, cells, channels)).astype(np.float32)
    field = cv2.resize(coarse, (width, height), interpolation=cv2.INTER_CUBIC)
    return field.reshape(height, width, channels)


def _easy_lesion(rng, yy, xx):
    """Image (float BGR) and mask of one dark, clearly bounded lesion on
    plain skin with grain."""
    height, width = yy.shape
    skin = np.array(
        [rng.uniform(120, 170),
         rng.uniform(140, 180),
         rng.uniform(190, 230)], np.float32)
    img = skin + rng.normal(0, 7, (height, width, 3))
    cy, cx = rng.uniform(0.35, 0.65, 2) * (height, width)
    ry, rx = rng.uniform(0.12, 0.3, 2) * (height, width)
    theta = np.arctan2(yy - cy, xx - cx)
    wobble = 1 + sum(
        rng.uniform(0, 0.12) * np.cos(k * theta + rng.uniform(0, 2 * np.pi))
        for k in (2, 3, 5))
    radius = np.sqrt(((yy - cy) / ry)**2 + ((xx - cx) / rx)**2)
    mask = (radius < wobble).astype(np.uint8)
    depth = np.clip(1.2 - radius / wobble, 0, 1)[..., None]
    lesion = np.array(
        [rng.uniform(30, 70),
         rng.uniform(40, 80),
         rng.uniform(70, 120)], np.float32)
    img = img * (1 - depth * mask[..., None]) + \
        lesion * depth * mask[..., None]
    return img, mask


def _hard_lesion(rng, yy, xx):
    """Image (float BGR) and mask of one lesion that is hard to delineate:
    low contrast to the skin, a fuzzy and ragged border, mottled inside,
    on skin with uneven lighting, grain and texture, with darker spots
    (naevi, freckles) outside the mask and hairs across it."""
    height, width = yy.shape
    size = min(height, width)
    skin = np.array(
        [rng.uniform(120, 170),
         rng.uniform(140, 180),
         rng.uniform(180, 230)], np.float32)
    img = skin + 22 * _smooth_field(rng, height, width, 3, 1) + \
        10 * _smooth_field(rng, height, width, 12, 3)
    # Lesion: an ellipse with a ragged border (low harmonics and a rough
    # angular field), of a colour only somewhat darker than the skin.
    cy, cx = rng.uniform(0.3, 0.7, 2) * (height, width)
    ry, rx = rng.uniform(0.12, 0.3, 2) * (height, width)
    theta = np.arctan2(yy - cy, xx - cx)
    wobble = 1 + sum(
        rng.uniform(0, 0.15) * np.cos(k * theta + rng.uniform(0, 2 * np.pi))
        for k in (2, 3, 4, 6, 9))
    rough = rng.normal(0, 0.06, 24)
    wobble += np.interp(theta, np.linspace(-np.pi, np.pi, 25),
                        np.append(rough, rough[0]))
    radius = np.sqrt(((yy - cy) / ry)**2 + ((xx - cx) / rx)**2) / wobble
    mask = (radius < 1).astype(np.uint8)
    # Opacity fades across the border over a random width: no sharp edge.
    fade = rng.uniform(0.15, 0.45)
    alpha = np.clip((1 + fade / 2 - radius) / fade, 0, 1)
    alpha *= np.clip(
        0.75 + 0.35 * _smooth_field(rng, height, width, 6, 1)[..., 0], 0.3,
        1)  # mottled pigment
    # Brownish (blue darkened most, red least), 15-40% darker than skin.
    darker = rng.uniform(0.62, 0.85) + np.array([-0.08, -0.04, 0.04],
                                                np.float32)
    img = img * (1 - alpha[..., None] * (1 - darker))
    # Distractors: darker spots of the lesion's kind, outside the mask.
    for _ in range(rng.integers(1, 6)):
        r = rng.uniform(0.02, 0.1) * size
        sy, sx = rng.uniform(r, height - r), rng.uniform(r, width - r)
        spot = np.sqrt((yy - sy)**2 + (xx - sx)**2) / r
        spot_alpha = np.clip(1.3 - spot, 0, 1) * (1 - mask)
        img *= 1 - spot_alpha[..., None] * (1 - darker * rng.uniform(0.8, 1.1))
    # Hairs: thin dark curves over everything.
    hair = np.zeros((height, width), np.float32)
    for _ in range(rng.integers(0, 5)):
        start = rng.uniform(0, 1, 2) * (width, height)
        heading = rng.uniform(0, 2 * np.pi)
        turn = rng.normal(0, 0.15, 8).cumsum()
        steps = rng.uniform(0.06, 0.15) * size
        points = [start]
        for dt in turn:
            points.append(
                points[-1] +
                steps * np.array([np.cos(heading + dt),
                                  np.sin(heading + dt)]))
        cv2.polylines(hair, [np.round(np.array(points)).astype(np.int32)],
                      False, 1.0, thickness=1, lineType=cv2.LINE_AA)
    img = img * (1 - 0.6 * hair[..., None]) + rng.normal(
        0, 9, (height, width, 3))
    return img, mask


def make_isic_lesions(out_dir: str, num_train: int = 100, num_val: int = 30,
                      size: Sequence[int] = (128, 128), seed: int = 0,
                      level: str = 'hard') -> None:
    """ISIC-2018 Task 1 layout: skin-toned images with one irregular lesion
    each; masks 0 / 255.

    ``level='hard'`` (default): low-contrast lesions with fuzzy, ragged
    borders and mottled pigment, on unevenly lit, textured skin with darker
    spots outside the lesion and hairs, so that a stock UNet does not reach
    the ceiling in a short schedule. ``'easy'``: a dark, clearly bounded
    lesion on plain skin (quick to learn; for tests of the machinery).
    """
    check_choice('level', level, LESION_LEVELS)
    draw = _hard_lesion if level == 'hard' else _easy_lesion
    height, width = size
    yy, xx = np.mgrid[:height, :width].astype(np.float32)
    for split, count in (('train', num_train), ('val', num_val)):
        rng = np.random.default_rng([seed, 4 if split == 'train' else 5])
        for sub in ('images', 'annotations'):
            os.makedirs(osp.join(out_dir, sub, split), exist_ok=True)
        step = _progress(count, f'isic {split}')
        for idx in range(count):
            img, mask = draw(rng, yy, xx)
            img = np.clip(img, 0, 255).astype(np.uint8)
            name = f'ISIC_{idx + (0 if split == "train" else 900000):07d}'
            cv2.imwrite(osp.join(out_dir, 'images', split, name + '.jpg'), img)
            cv2.imwrite(
                osp.join(out_dir, 'annotations', split,
                         name + '_segmentation.png'), mask * 255)
            step()


#: Object kinds of :func:`make_isic_arrangements`: where the second bar
#: starts on the first (its middle: T, its end: L).
ARRANGEMENTS = {'T': 0.0, 'L': 0.5}


def _arrangement(kind: str, center: np.ndarray, length: float,
                 angle: float) -> list:
    """The two bars of an object, each ``(start, end)`` in pixels: the
    first of ``length`` centred on ``center`` along ``angle``, the second
    as long, perpendicular to it, from its middle (T) or its end (L)."""
    u = np.array([np.cos(angle), np.sin(angle)])
    n = np.array([-u[1], u[0]])
    first = (center - u * length / 2, center + u * length / 2)
    joint = center + u * length * ARRANGEMENTS[kind]
    # Centre the object's extent: both kinds span length x length, along
    # u from -length / 2 to length / 2 and along n from 0 to length.
    shift = -n * length / 2
    bars = [first, (joint, joint + n * length)]
    return [(a + shift, b + shift) for a, b in bars]


def _bars(kind: str, center, length: float, thick: int, angle: float,
          shape) -> np.ndarray:
    """uint8 map of ``shape``, 1 on the object of :func:`_arrangement`
    drawn ``thick`` pixels wide."""
    obj = np.zeros(shape, np.uint8)
    for a, b in _arrangement(kind, center, length, angle):
        cv2.line(obj, tuple(np.round(a).astype(int)),
                 tuple(np.round(b).astype(int)), 1, thick)
    return obj


def _paint(img: np.ndarray, obj: np.ndarray, rng: np.random.Generator):
    """Colour the pixels of ``obj`` in ``img``: one random colour with
    grain, so that colour tells nothing about the kind."""
    img[obj > 0] = np.clip(
        rng.uniform(0, 255, 3) + rng.normal(0, 8, (int(obj.sum()), 3)), 0, 255)


def angle_range(angles) -> Tuple[float, float]:
    """``angles`` (degrees, ``(low, high)``) in radians, checked."""
    try:
        low, high = (float(a) for a in angles)
    except (TypeError, ValueError):
        raise ValueError(f'angles must be two numbers (low, high) in '
                         f'degrees, got {angles!r}') from None
    if not (math.isfinite(low) and math.isfinite(high) and low <= high):
        raise ValueError(f'angles must be finite with low <= high, got '
                         f'{angles!r}')
    return math.radians(low), math.radians(high)


def make_arrangement_patches(count: int, size: Sequence[int] = (32, 32),
                             seed: int = 0,
                             angles: Sequence[float] = (0.0, 360.0)):
    """An image classification set of the arrangement task: ``count``
    patches [count, H, W, 3] (BGR, uint8), each one object of
    :func:`make_isic_arrangements` (the same two bars joined as a T or an
    L, rotated, scaled and coloured at random on a textured background),
    near the patch's centre and about half its size, and the labels
    [count] (int64; 1: T, 0: L; alternating, so balanced).

    ``angles``: the range ``(low, high)`` in degrees the objects' rotation
    is drawn from, uniformly. Shifting both ends by ``r`` with the same
    ``seed`` gives the same patches (texture, colour, scale, kind) with
    every object turned by ``r`` more: a paired rotated test set."""
    low, high = angle_range(angles)
    height, width = size
    rng = np.random.default_rng([seed, 10])
    images = np.empty((count, height, width, 3), np.uint8)
    labels = np.arange(count, dtype=np.int64) % 2 ^ 1
    for idx in range(count):
        kind = 'T' if labels[idx] else 'L'
        img = _texture(rng, height, width)
        length = rng.uniform(0.45, 0.6) * min(height, width)
        thick = max(2, int(round(rng.uniform(0.22, 0.3) * length)))
        center = np.array([width, height]) / 2 + rng.uniform(-2, 2, 2)
        angle = rng.uniform(low, high)
        # The colour and grain come from the patch's own stream: how many
        # grain values the object takes depends on its angle, and the
        # shared stream must not, for the rotated sets to stay paired.
        _paint(img, _bars(kind, center, length, thick, angle, (height, width)),
               np.random.default_rng([seed, 11, idx]))
        images[idx] = img
    return images, labels


def make_isic_arrangements(out_dir: str, num_train: int = 200,
                           num_val: int = 60, size: Sequence[int] = (128, 128),
                           seed: int = 0) -> None:
    """ISIC-2018 layout (masks 0 / 255) for a part-whole task: each image
    holds two to four objects, each made of the same two bars (equal
    length, width and colour law, so equal in area and extent), joined as
    a T or as an L; the mask covers the T objects only. Every image has at
    least one of each, so no pixel-wise cue (colour, width, texture) tells
    the classes apart: a model must see where one bar meets the other.
    Objects are rotated, scaled and placed at random on a textured
    background, apart from each other. ``objects/<split>/<name>.png``
    holds both kinds (1: T, 2: L) for analyses that ask whether a model
    tells them apart."""
    height, width = size
    for split, count in (('train', num_train), ('val', num_val)):
        rng = np.random.default_rng([seed, 8 if split == 'train' else 9])
        for sub in ('images', 'annotations', 'objects'):
            os.makedirs(osp.join(out_dir, sub, split), exist_ok=True)
        step = _progress(count, f'parts {split}')
        for idx in range(count):
            img = _texture(rng, height, width)
            mask = np.zeros((height, width), np.uint8)
            taken = np.zeros((height, width), np.uint8)
            objects = np.zeros((height, width), np.uint8)
            kinds = ['T', 'L'] + list(
                rng.choice(['T', 'L'], rng.integers(0, 3)))
            for kind in kinds:
                for _ in range(50):  # a free place, else the object is left
                    length = rng.uniform(0.14, 0.24) * min(height, width)
                    thick = int(round(rng.uniform(0.22, 0.3) * length))
                    margin = length * 0.75
                    center = rng.uniform([margin, margin],
                                         [width - margin, height - margin])
                    obj = _bars(kind, center, length, thick,
                                rng.uniform(0, 2 * np.pi), mask.shape)
                    grown = cv2.dilate(obj, np.ones((5, 5), np.uint8))
                    if not (grown & taken).any():
                        break
                else:
                    continue
                taken |= grown
                objects[obj > 0] = 1 if kind == 'T' else 2
                _paint(img, obj, rng)
                if kind == 'T':
                    mask |= obj
            name = f'ISIC_{idx + (0 if split == "train" else 900000):07d}'
            cv2.imwrite(osp.join(out_dir, 'images', split, name + '.jpg'), img)
            cv2.imwrite(
                osp.join(out_dir, 'annotations', split,
                         name + '_segmentation.png'), mask * 255)
            cv2.imwrite(osp.join(out_dir, 'objects', split, name + '.png'),
                        objects)
            step()


def make_all(
    root: str, seed: int = 0, scale: float = 1.0,
    only: Optional[Sequence[str]] = None, isic_size: Sequence[int] = (128, 128)
) -> None:
    """The sets under ``root/{coco,VOCdevkit,ISIC2018}`` (and, when
    ``only`` names ``'parts'``, ``root/Parts``, ISIC-2018 layout);
    ``scale`` multiplies the image counts; ``isic_size`` is the lesion
    images' ``(height, width)``."""
    n = lambda k: max(2, int(round(k * scale)))  # noqa: E731
    only = set(only or ('coco', 'voc', 'isic'))
    if 'parts' in only:
        make_isic_arrangements(osp.join(root, 'Parts'), n(200), n(60),
                               seed=seed)
    if 'coco' in only:
        make_coco_instances(osp.join(root, 'coco'), n(200), n(50), seed=seed)
    if 'voc' in only:
        make_voc_semantic(root, n(100), n(30), seed=seed)
    if 'isic' in only:
        make_isic_lesions(osp.join(root, 'ISIC2018'), n(100), n(30),
                          size=isic_size, seed=seed)
