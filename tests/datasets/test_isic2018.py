"""ISIC2018Dataset reads the official layout; the converter builds it."""
import os.path as osp
import subprocess
import sys

import mmcv
import numpy as np
from mmengine.registry import init_default_scope

import mmhgw  # noqa: F401

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
CONVERTER = osp.join(ROOT, 'tools', 'dataset_converters', 'isic2018.py')


def write_official_download(folder, split_dirs, ids):
    """Tiny stand-in for the official folders: jpg images, 0/255 masks."""
    image_dir, mask_dir = split_dirs
    for i, name in enumerate(ids):
        img = np.full((24, 32, 3), 40 * i, dtype=np.uint8)
        mask = np.zeros((24, 32), dtype=np.uint8)
        mask[4:12 + i, 6:20] = 255
        mmcv.imwrite(img, osp.join(folder, image_dir, f'{name}.jpg'))
        mmcv.imwrite(mask,
                     osp.join(folder, mask_dir, f'{name}_segmentation.png'))


def test_converter_and_dataset(tmp_path):
    download = tmp_path / 'download'
    write_official_download(download, ('ISIC2018_Task1-2_Training_Input',
                                       'ISIC2018_Task1_Training_GroundTruth'),
                            ['ISIC_0000000', 'ISIC_0000001'])
    write_official_download(download,
                            ('ISIC2018_Task1-2_Validation_Input',
                             'ISIC2018_Task1_Validation_GroundTruth'),
                            ['ISIC_0000010'])
    # An image without a mask is reported and skipped.
    mmcv.imwrite(
        np.zeros((8, 8, 3), np.uint8),
        str(download / 'ISIC2018_Task1-2_Training_Input' / 'ISIC_0000099.jpg'))
    out = tmp_path / 'ISIC2018'
    done = subprocess.run(
        [sys.executable, CONVERTER,
         str(download), '-o',
         str(out)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert '3 image/mask pairs' in done.stdout
    assert 'without a mask' in done.stderr

    init_default_scope('mmseg')
    from mmseg.registry import DATASETS
    dataset = DATASETS.build(
        dict(
            type='ISIC2018Dataset', data_root=str(out),
            data_prefix=dict(img_path='images/train',
                             seg_map_path='annotations/train'), pipeline=[
                                 dict(type='LoadImageFromFile'),
                                 dict(type='LoadAnnotations'),
                                 dict(type='PackSegInputs')
                             ]))
    assert len(dataset) == 2
    assert dataset.metainfo['classes'] == ('background', 'lesion')
    sample = dataset[1]['data_samples']
    labels = sample.gt_sem_seg.data
    # 255 (lesion) became class 1, not the ignore index.
    assert set(labels.unique().tolist()) == {0, 1}
    assert int(labels.sum()) == (13 - 4) * (20 - 6)


def test_converter_fails_clearly_without_data(tmp_path):
    done = subprocess.run(
        [sys.executable, CONVERTER, str(tmp_path)], capture_output=True,
        text=True)
    assert done.returncode != 0
    assert 'no ISIC-2018 Task 1 split found' in done.stderr
