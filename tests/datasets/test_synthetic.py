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
