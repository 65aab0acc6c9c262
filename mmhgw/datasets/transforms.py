"""A fixed affine warp of a sample, and the warped instances as the ground
truth of mmdet's CocoMetric, for robustness sweeps at test time."""
import math

import cv2
import numpy as np
from mmcv.transforms import BaseTransform
from mmengine.registry import TRANSFORMS

__all__ = ['AffineWarp', 'InstancesFromLabels', 'affine_matrix']

#: What AffineWarp warps, in this order.
WARPED_KEYS = ('img', 'gt_seg_map', 'gt_masks', 'gt_bboxes')


def affine_matrix(width: int, height: int, angle: float = 0.0,
                  scale: float = 1.0, shear: float = 0.0) -> np.ndarray:
    """The 2x3 matrix that rotates by ``angle`` degrees (counter-clockwise
    on screen), scales by ``scale`` and shears horizontally by ``shear``
    degrees, all about the image centre:
    ``A = T(c) R(angle) Sh(shear) S(scale) T(-c)``."""
    a, s = math.radians(angle), math.radians(shear)
    rotate = np.array([[math.cos(a), math.sin(a), 0],
                       [-math.sin(a), math.cos(a), 0], [0, 0, 1]])
    shear_m = np.array([[1, math.tan(s), 0], [0, 1, 0], [0, 0, 1]])
    cx, cy = (width - 1) / 2, (height - 1) / 2
    to_centre = np.array([[1, 0, -cx], [0, 1, -cy], [0, 0, 1]])
    back = np.array([[1, 0, cx], [0, 1, cy], [0, 0, 1]])
    full = back @ rotate @ shear_m @ np.diag([scale, scale, 1]) @ to_centre
    return full[:2].astype(np.float64)


@TRANSFORMS.register_module()
class AffineWarp(BaseTransform):
    """Warps the image and its labels by one fixed affine map about the
    image centre (:func:`affine_matrix`), keeping their size.

    The image is resampled bilinearly with ``img_pad_val`` where the map
    leaves it; the semantic mask (``gt_seg_map``) by nearest neighbour with
    ``seg_pad_val`` (mmseg's ignore index by default), so pixels brought in
    from outside the image are not scored. Instance labels follow:
    ``gt_bboxes`` (projected, clipped to the image) and bitmap
    ``gt_masks``. Each of these is warped once, at the size it was loaded
    at: put one ``AffineWarp`` right after each loading transform (mmseg's
    test pipelines load the mask after resizing the image; the mask must
    not be resized), and later ones warp only what the earlier left
    (``results['affine_warped']`` lists what is done). The identity
    (angle 0, scale 1, shear 0) changes nothing.

    Args:
        angle: rotation in degrees.
        scale: isotropic scale factor, > 0.
        shear: horizontal shear angle in degrees, in (-90, 90).
        img_pad_val: value of image pixels from outside the image.
        seg_pad_val: label of mask pixels from outside the image.
    """

    def __init__(self, angle: float = 0.0, scale: float = 1.0,
                 shear: float = 0.0, img_pad_val: float = 0,
                 seg_pad_val: int = 255):
        values = dict(angle=angle, scale=scale, shear=shear)
        for name, value in values.items():
            if not math.isfinite(value):
                raise ValueError(f'{name} must be finite, got {value}')
        if scale <= 0:
            raise ValueError(f'scale must be > 0, got {scale}')
        if not -90 < shear < 90:
            raise ValueError(f'shear must be in (-90, 90) degrees, '
                             f'got {shear}')
        self.angle, self.scale, self.shear = angle, scale, shear
        self.img_pad_val, self.seg_pad_val = img_pad_val, seg_pad_val

    def _identity(self) -> bool:
        return self.angle == 0 and self.scale == 1 and self.shear == 0

    def transform(self, results: dict) -> dict:
        if self._identity():
            return results
        done = results.setdefault('affine_warped', [])
        todo = [
            key for key in WARPED_KEYS
            if results.get(key) is not None and key not in done
        ]
        for key in todo:
            results[key] = getattr(self, f'_warp_{key}')(results[key], results)
            done.append(key)
        return results

    def _matrix(self, height: int, width: int) -> np.ndarray:
        return affine_matrix(width, height, self.angle, self.scale, self.shear)

    def _warp_array(self, array, flags, pad):
        height, width = array.shape[:2]
        return cv2.warpAffine(array, self._matrix(height, width),
                              (width, height), flags=flags,
                              borderMode=cv2.BORDER_CONSTANT, borderValue=pad)

    def _warp_img(self, img, results):
        return self._warp_array(img, cv2.INTER_LINEAR, self.img_pad_val)

    def _warp_gt_seg_map(self, seg, results):
        return self._warp_array(seg, cv2.INTER_NEAREST, self.seg_pad_val)

    def _warp_gt_masks(self, masks, results):
        from mmdet.structures.mask import BitmapMasks
        if not isinstance(masks, BitmapMasks):
            raise TypeError('AffineWarp warps bitmap instance masks only '
                            '(LoadAnnotations with poly2mask=True), got '
                            f'{type(masks).__name__}')
        warped = [
            self._warp_array(m, cv2.INTER_NEAREST, 0) for m in masks.masks
        ]
        array = np.stack(warped) if warped else \
            np.zeros((0, masks.height, masks.width), np.uint8)
        return BitmapMasks(array, masks.height, masks.width)

    def _warp_gt_bboxes(self, boxes, results):
        # Boxes are in the frame of the image as loaded (right after
        # loading: the original image).
        height, width = results['ori_shape'][:2]
        boxes.project_(np.vstack([self._matrix(height, width), [0, 0, 1]]))
        boxes.clip_((height, width))
        return boxes

    def __repr__(self) -> str:
        return (f'{type(self).__name__}(angle={self.angle}, '
                f'scale={self.scale}, shear={self.shear})')


@TRANSFORMS.register_module()
class InstancesFromLabels(BaseTransform):
    """Rewrites ``results['instances']`` from the loaded labels
    (``gt_bboxes``, ``gt_bboxes_labels``, ``gt_ignore_flags`` and, when
    loaded, ``gt_masks``), after any :class:`AffineWarp`.

    mmdet's ``CocoMetric`` without an ``ann_file`` builds its ground truth
    from the ``instances`` of each sample (packed through ``PackDetInputs``'
    ``meta_keys``); the dataset's own ``instances`` are the annotation
    file's, which a warp of the image leaves behind. Each object gets
    ``bbox`` (x1, y1, x2, y2 in the frame the labels were loaded in),
    ``bbox_label``, ``ignore_flag`` and, with masks, ``mask`` as COCO
    run-length encoding. With masks the box is the mask's tight box (the
    box of a rotated box is larger than the box of the rotated object, as
    COCO boxes are the tight boxes of their objects); without, the loaded
    (warped) box. Objects with an empty mask or box (moved out of the
    image) are dropped.
    """

    def transform(self, results: dict) -> dict:
        from pycocotools import mask as mask_util
        for key in ('gt_bboxes', 'gt_bboxes_labels'):
            if results.get(key) is None:
                raise KeyError(f'{type(self).__name__} needs {key} (put it '
                               'after LoadAnnotations with with_bbox=True '
                               'and with_label=True)')
        labels = results['gt_bboxes_labels']
        boxes = results['gt_bboxes'].tensor.tolist()
        ignore = results.get('gt_ignore_flags')
        masks = results.get('gt_masks')
        arrays = masks.to_ndarray() if masks is not None else None
        instances = []
        for i, label in enumerate(labels):
            instance = dict(
                bbox_label=int(label),
                ignore_flag=int(ignore[i]) if ignore is not None else 0)
            if arrays is not None:
                ys, xs = np.nonzero(arrays[i])
                if len(xs) == 0:
                    continue
                instance['bbox'] = [
                    float(xs.min()),
                    float(ys.min()),
                    float(xs.max() + 1),
                    float(ys.max() + 1)
                ]
                instance['mask'] = mask_util.encode(
                    np.asfortranarray(arrays[i].astype(np.uint8)))
            else:
                x1, y1, x2, y2 = boxes[i]
                if x2 <= x1 or y2 <= y1:
                    continue
                instance['bbox'] = [x1, y1, x2, y2]
            instances.append(instance)
        results['instances'] = instances
        return results
