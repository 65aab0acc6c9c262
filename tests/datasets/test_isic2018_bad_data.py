"""Bad ISIC-2018 data fails clearly, naming the file or folder: nothing
trains on misaligned masks, nothing is dropped or kept stale silently."""
import os
import os.path as osp
import subprocess
import sys
import time

import mmcv
import numpy as np
import pytest
from mmengine.registry import init_default_scope

import mmhgw  # noqa: F401

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
CONVERTER = osp.join(ROOT, 'tools', 'dataset_converters', 'isic2018.py')
TRAIN_DIRS = ('ISIC2018_Task1-2_Training_Input',
              'ISIC2018_Task1_Training_GroundTruth')
VAL_DIRS = ('ISIC2018_Task1-2_Validation_Input',
            'ISIC2018_Task1_Validation_GroundTruth')


def write_pair(root, name, size=(24, 32), mask_size=None, image_ext='.jpg',
               dirs=('images/train', 'annotations/train'), lesion=255):
    h, w = size
    mh, mw = mask_size or size
    mmcv.imwrite(np.full((h, w, 3), 90, np.uint8),
                 osp.join(root, dirs[0], name + image_ext))
    mask = np.zeros((mh, mw), np.uint8)
    mask[2:mh // 2, 3:mw // 2] = lesion
    mmcv.imwrite(mask, osp.join(root, dirs[1], name + '_segmentation.png'))


def build(root, pipeline=None, split='train'):
    init_default_scope('mmseg')
    from mmseg.registry import DATASETS
    if pipeline is None:
        pipeline = [dict(type='LoadImageFromFile'),
                    dict(type='LoadAnnotations'),
                    dict(type='Resize', scale=(16, 16), keep_ratio=False),
                    dict(type='PackSegInputs')]
    return DATASETS.build(dict(
        type='ISIC2018Dataset', data_root=str(root),
        data_prefix=dict(img_path=f'images/{split}',
                         seg_map_path=f'annotations/{split}'),
        pipeline=pipeline))


@pytest.mark.parametrize('order', ['train', 'test'])
def test_mask_of_another_size_is_refused(tmp_path, order):
    write_pair(tmp_path, 'ISIC_0000000')
    write_pair(tmp_path, 'ISIC_0000001', mask_size=(20, 30))
    resize = dict(type='Resize', scale=(16, 16), keep_ratio=False)
    load = [dict(type='LoadAnnotations')]
    # mmseg's test pipelines load the mask after resizing the image.
    middle = [*load, resize] if order == 'train' else [resize, *load]
    dataset = build(tmp_path, [dict(type='LoadImageFromFile'), *middle,
                               dict(type='PackSegInputs')])
    assert dataset[0]['inputs'].shape[-2:] == (16, 16)
    with pytest.raises(ValueError) as err:
        dataset[1]
    message = str(err.value)
    assert 'ISIC_0000001_segmentation.png is 30x20' in message
    assert 'ISIC_0000001.jpg is 32x24' in message


def test_corrupt_mask_is_named(tmp_path):
    write_pair(tmp_path, 'ISIC_0000000')
    mask = tmp_path / 'annotations/train/ISIC_0000000_segmentation.png'
    mask.write_bytes(mask.read_bytes()[:40])  # truncated PNG
    dataset = build(tmp_path)
    with pytest.raises(ValueError, match=f'cannot read mask {mask}'):
        dataset[0]


def test_empty_split_names_the_folder(tmp_path):
    write_pair(tmp_path, 'ISIC_0000000')
    os.makedirs(tmp_path / 'images/val')
    with pytest.raises(FileNotFoundError,
                       match=f'no images .* in {tmp_path}/images/val'):
        build(tmp_path, split='val')
    with pytest.raises(FileNotFoundError, match='images/test does not'):
        build(tmp_path, split='test')


def test_image_suffixes_in_any_case(tmp_path):
    for i, ext in enumerate(['.jpg', '.JPG', '.jpeg', '.JPEG']):
        write_pair(tmp_path, f'ISIC_000000{i}', image_ext=ext)
    mmcv.imwrite(np.zeros((4, 4, 3), np.uint8),
                 str(tmp_path / 'images/train/notes.png'))
    dataset = build(tmp_path)
    assert len(dataset) == 4
    assert {osp.splitext(dataset.get_data_info(i)['img_path'])[1]
            for i in range(4)} == {'.jpg', '.JPG', '.jpeg', '.JPEG'}
    labels = dataset[1]['data_samples'].gt_sem_seg.data
    assert set(labels.unique().tolist()) == {0, 1}


def convert(download, out, *extra):
    return subprocess.run([sys.executable, CONVERTER, str(download), '-o',
                           str(out), *extra], capture_output=True, text=True)


def test_converter_takes_upper_case_suffixes(tmp_path):
    write_pair(tmp_path / 'dl', 'ISIC_0000000', image_ext='.JPG',
               dirs=TRAIN_DIRS)
    write_pair(tmp_path / 'dl', 'ISIC_0000001', dirs=TRAIN_DIRS)
    done = convert(tmp_path / 'dl', tmp_path / 'out')
    assert done.returncode == 0, done.stderr
    assert '2 image/mask pairs' in done.stdout
    assert len(build(tmp_path / 'out')) == 2


def test_converter_copy_replaces_a_stale_copy(tmp_path):
    write_pair(tmp_path / 'dl', 'ISIC_0000000', dirs=TRAIN_DIRS)
    assert convert(tmp_path / 'dl', tmp_path / 'out', '--copy').returncode \
        == 0
    copied = tmp_path / 'out/annotations/train/ISIC_0000000_segmentation.png'
    assert not copied.is_symlink()
    # The mask is corrected at the source (same size, new content).
    time.sleep(0.01)
    write_pair(tmp_path / 'dl', 'ISIC_0000000', dirs=TRAIN_DIRS, lesion=0)
    source = tmp_path / 'dl' / TRAIN_DIRS[1] / copied.name
    assert copied.read_bytes() != source.read_bytes()
    done = convert(tmp_path / 'dl', tmp_path / 'out', '--copy')
    assert done.returncode == 0, done.stderr
    assert copied.read_bytes() == source.read_bytes()
    # Unchanged sources are not copied again.
    again = convert(tmp_path / 'dl', tmp_path / 'out', '--copy')
    assert '(0 files written or updated)' in again.stdout


def test_converter_fails_on_an_empty_validation_folder(tmp_path):
    write_pair(tmp_path / 'dl', 'ISIC_0000000', dirs=TRAIN_DIRS)
    for folder in VAL_DIRS:
        os.makedirs(tmp_path / 'dl' / folder)
    done = convert(tmp_path / 'dl', tmp_path / 'out')
    assert done.returncode != 0
    assert '[val] no image/mask pair in' in done.stderr
    assert VAL_DIRS[0] in done.stderr
    # The training split was converted nonetheless.
    assert (tmp_path / 'out/images/train/ISIC_0000000.jpg').exists()
