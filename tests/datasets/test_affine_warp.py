"""AffineWarp: a fixed affine map of the image and its labels."""
import numpy as np
import pytest

from mmhgw.datasets import AffineWarp, affine_matrix


def sample(size=8):
    img = np.arange(size * size * 3, dtype=np.uint8).reshape(size, size, 3)
    seg = np.zeros((size, size), np.uint8)
    seg[:, :size // 2] = 1  # left half
    return dict(img=img.copy(), gt_seg_map=seg, ori_shape=(size, size))


def test_identity_changes_nothing():
    s = sample()
    img, seg = s['img'].copy(), s['gt_seg_map'].copy()
    out = AffineWarp()(s)
    assert np.array_equal(out['img'], img)
    assert np.array_equal(out['gt_seg_map'], seg)


def test_quarter_turn_is_rot90_counter_clockwise():
    s = sample()
    expected_seg = np.rot90(s['gt_seg_map']).copy()
    expected_img = np.rot90(s['img']).copy()
    out = AffineWarp(angle=90)(s)
    assert np.array_equal(out['gt_seg_map'], expected_seg)
    assert np.array_equal(out['img'], expected_img)
    assert out['affine_warped'] == ['img', 'gt_seg_map']


def test_outside_pixels_are_ignored_labels_and_padded_image():
    out = AffineWarp(scale=0.5, img_pad_val=7, seg_pad_val=255)(sample())
    assert out['gt_seg_map'][0, 0] == 255 and out['img'][0, 0, 0] == 7
    # The centre keeps its labels: left half 1, right half 0.
    assert out['gt_seg_map'][4, 2] == 1 and out['gt_seg_map'][4, 5] == 0


def test_each_key_is_warped_once():
    """A second warp (after the mask loads) leaves the image alone."""
    warp = AffineWarp(angle=90)
    s = sample()
    seg = s.pop('gt_seg_map')
    s = warp(s)  # after LoadImageFromFile: the image only
    img = s['img'].copy()
    s['gt_seg_map'] = seg
    s = warp(s)  # after LoadAnnotations: the mask only
    assert np.array_equal(s['img'], img)
    assert np.array_equal(s['gt_seg_map'], np.rot90(seg))


def test_matrix_composes_rotation_shear_scale_about_centre():
    m = affine_matrix(11, 11, angle=30, scale=2, shear=10)
    centre = np.array([5, 5, 1.0])
    assert np.allclose(m @ centre, [5, 5])
    linear = m[:, :2]
    assert np.isclose(abs(np.linalg.det(linear)), 4)  # area x scale^2


def test_boxes_and_masks_follow():
    pytest.importorskip('mmdet')
    from mmdet.structures.bbox import HorizontalBoxes
    from mmdet.structures.mask import BitmapMasks
    s = sample()
    mask = np.zeros((1, 8, 8), np.uint8)
    mask[0, 0:2, 0:8] = 1  # top rows
    s['gt_masks'] = BitmapMasks(mask, 8, 8)
    s['gt_bboxes'] = HorizontalBoxes(np.array([[0, 0, 8, 2]], np.float32))
    out = AffineWarp(angle=90)(s)
    # Top rows turn into left columns (counter-clockwise).
    assert out['gt_masks'].masks[0][:, :2].all()
    assert out['gt_masks'].masks[0][:, 2:].sum() == 0
    x1, y1, x2, y2 = out['gt_bboxes'].tensor[0].tolist()
    assert x2 - x1 < 3 and y2 - y1 > 6


@pytest.mark.parametrize('kwargs,name', [
    (dict(scale=0), 'scale'),
    (dict(scale=-1), 'scale'),
    (dict(shear=90), 'shear'),
    (dict(angle=float('nan')), 'angle'),
])
def test_bad_arguments_are_named(kwargs, name):
    with pytest.raises(ValueError, match=name):
        AffineWarp(**kwargs)
