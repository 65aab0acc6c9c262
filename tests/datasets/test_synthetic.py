"""The built-in lesion set: ISIC-2018 layout, deterministic, and, at the
default level, low contrast with distractors outside the lesions."""
import glob
import os.path as osp

import cv2
import numpy as np
import pytest

from mmhgw.datasets.synthetic import make_isic_lesions


def load(root, split='train'):
    images = sorted(glob.glob(osp.join(root, 'images', split, '*.jpg')))
    masks = sorted(glob.glob(osp.join(root, 'annotations', split, '*.png')))
    return ([cv2.imread(p).astype(np.float32) for p in images],
            [cv2.imread(p, cv2.IMREAD_GRAYSCALE)
             for p in masks], images, masks)


def lesion_contrast(img, mask):
    """Mean brightness outside the lesion over that inside."""
    grey = img.mean(-1)
    return grey[mask == 0].mean() / grey[mask > 0].mean()


def test_layout_determinism_and_difficulty(tmp_path):
    for name, level, seed in (('a', 'hard', 3), ('b', 'hard', 3), ('easy',
                                                                   'easy', 3)):
        make_isic_lesions(str(tmp_path / name), num_train=12, num_val=2,
                          size=(64, 80), seed=seed, level=level)
    imgs, masks, img_paths, mask_paths = load(tmp_path / 'a')
    # The ISIC-2018 layout, as the converter writes it.
    assert [osp.basename(p) for p in img_paths
            ][:2] == ['ISIC_0000000.jpg', 'ISIC_0000001.jpg']
    assert osp.basename(mask_paths[0]) == 'ISIC_0000000_segmentation.png'
    assert osp.basename(load(tmp_path / 'a', 'val')[2][0]) == \
        'ISIC_0900000.jpg'
    assert imgs[0].shape == (64, 80, 3)
    assert all(set(np.unique(m)) <= {0, 255} and (m > 0).any() for m in masks)
    # Same seed, same bytes.
    for p, q in zip(img_paths, load(tmp_path / 'b')[2]):
        assert open(p, 'rb').read() == open(q, 'rb').read()
    # Lesions are less distinct from the skin than in the easy set, and
    # there is dark structure (spots, hairs) outside them.
    easy_imgs, easy_masks, _, _ = load(tmp_path / 'easy')
    hard = np.median([lesion_contrast(i, m) for i, m in zip(imgs, masks)])
    easy = np.median(
        [lesion_contrast(i, m) for i, m in zip(easy_imgs, easy_masks)])
    assert 1.05 < hard < easy
    dark_outside = [(img.mean(-1)[m == 0] < img.mean(-1)[m > 0].mean()).mean()
                    for img, m in zip(imgs, masks)]
    assert np.mean(dark_outside) > 0.01
    with pytest.raises(ValueError, match='level must be one of'):
        make_isic_lesions(str(tmp_path / 'c'), 1, 1, level='medium')


def test_arrangement_set_differs_only_in_where_the_bars_meet(tmp_path):
    from mmhgw.datasets.synthetic import _arrangement, make_isic_arrangements
    center, length = np.array([40.0, 40.0]), 20.0
    drawn = {}
    for kind in ('T', 'L'):
        bars = _arrangement(kind, center, length, 0.3)
        (a0, a1), (b0, b1) = bars
        # Two bars of the same length, at right angles.
        assert np.allclose([np.linalg.norm(a1 - a0),
                            np.linalg.norm(b1 - b0)], length)
        assert abs(np.dot(a1 - a0, b1 - b0)) < 1e-9
        # The second starts at the first's middle (T) or end (L).
        start = (a0 + a1) / 2 if kind == 'T' else a1
        assert np.allclose(b0, start)
        # Both kinds span length x length around the centre.
        u = (a1 - a0) / length
        frame = np.stack([u, [-u[1], u[0]]])
        local = (np.array([a0, a1, b0, b1]) - center) @ frame.T
        assert np.allclose(local.min(0), -length / 2)
        assert np.allclose(local.max(0), length / 2)
        canvas = np.zeros((80, 80), np.uint8)
        for a, b in bars:
            cv2.line(canvas, tuple(np.round(a).astype(int)),
                     tuple(np.round(b).astype(int)), 1, 5)
        drawn[kind] = canvas
    # Equal area up to where the bars overlap.
    assert abs(int(drawn['T'].sum()) - int(drawn['L'].sum())) < 0.1 * \
        drawn['T'].sum()
    for name in ('a', 'b'):
        make_isic_arrangements(str(tmp_path / name), 6, 2, size=(96, 96),
                               seed=1)
    imgs, masks, img_paths, mask_paths = load(tmp_path / 'a')
    assert len(imgs) == 6 and imgs[0].shape == (96, 96, 3)
    assert osp.basename(mask_paths[0]) == 'ISIC_0000000_segmentation.png'
    # Every image has a T (foreground), and the L objects stay background.
    assert all(set(np.unique(m)) == {0, 255} for m in masks)
    assert all((m > 0).mean() < 0.2 for m in masks)
    for p, q in zip(img_paths, load(tmp_path / 'b')[2]):
        assert open(p, 'rb').read() == open(q, 'rb').read()
    # The object map: the T objects are the mask, the L objects outside it.
    for path, m in zip(mask_paths, masks):
        name = osp.basename(path).replace('_segmentation', '')
        objects = cv2.imread(str(tmp_path / 'a' / 'objects' / 'train' / name),
                             cv2.IMREAD_GRAYSCALE)
        assert ((objects == 1) == (m > 0)).all()
        assert (objects == 2).any()


def test_arrangement_patches_are_balanced_and_repeatable():
    from mmhgw.datasets.synthetic import make_arrangement_patches
    images, labels = make_arrangement_patches(6, (24, 24), seed=3)
    assert images.shape == (6, 24, 24, 3) and images.dtype == np.uint8
    assert labels.tolist() == [1, 0, 1, 0, 1, 0]
    again, _ = make_arrangement_patches(6, (24, 24), seed=3)
    assert np.array_equal(images, again)
    assert not np.array_equal(images,
                              make_arrangement_patches(6, (24, 24), 4)[0])


def test_arrangement_patches_turned_by_an_offset_are_the_same_patches():
    from mmhgw.datasets.synthetic import make_arrangement_patches
    upright, labels = make_arrangement_patches(8, (32, 32), 1, angles=(0, 0))
    # A full turn: the same patches, so the offset changes nothing else.
    full, _ = make_arrangement_patches(8, (32, 32), 1, angles=(360, 360))
    assert np.array_equal(upright, full)
    # A quarter turn: the same texture, colour and kind, the object moved.
    turned, again = make_arrangement_patches(8, (32, 32), 1, angles=(90, 90))
    assert np.array_equal(labels, again)
    for a, b in zip(upright, turned):
        changed = (a != b).any(-1)
        assert 0.05 < changed.mean() < 0.6  # the object's pixels alone


@pytest.mark.parametrize('angles', [(3, 1), (0, float('nan')), 5, (1, 2, 3)])
def test_arrangement_patches_refuse_a_bad_angle_range(angles):
    from mmhgw.datasets.synthetic import make_arrangement_patches
    with pytest.raises(ValueError, match='angles must be'):
        make_arrangement_patches(2, (16, 16), angles=angles)


def test_demo_data_tool_makes_lesions_of_the_given_size(tmp_path):
    import subprocess
    import sys
    root = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
    tool = osp.join(root, 'tools', 'make_demo_data.py')
    cmd = [
        sys.executable, tool, '--out',
        str(tmp_path), '--only', 'isic', '--scale', '0.02'
    ]
    done = subprocess.run(cmd + ['--isic-size', '48', '64'],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    images, masks, _, _ = load(str(tmp_path / 'ISIC2018'))
    assert len(images) == 2
    assert {im.shape for im in images} == {(48, 64, 3)}
    assert {m.shape for m in masks} == {(48, 64)}
    bad = subprocess.run(cmd + ['--isic-size', '8', '64'], capture_output=True,
                         text=True)
    assert bad.returncode == 2
    assert '--isic-size must be at least 16 16, got 8 64' in bad.stderr
    # A scale of 0 would still write the smallest sets, not none.
    empty = subprocess.run(cmd + ['--scale', '0'], capture_output=True,
                           text=True)
    assert empty.returncode == 2
    assert '--scale must be a positive finite number, got 0.0' in empty.stderr
