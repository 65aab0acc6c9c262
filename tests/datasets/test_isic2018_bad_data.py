"""Bad ISIC-2018 data fails clearly, naming the file or folder: nothing
trains on misaligned masks, nothing is dropped or kept stale silently."""
import os
import os.path as osp
import shutil
import subprocess
import sys
import time

import mmcv
import numpy as np
import pytest
from mmengine.registry import init_default_scope

import mmhgw  # noqa: F401
from mmhgw.testing import logged

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
        pipeline = [
            dict(type='LoadImageFromFile'),
            dict(type='LoadAnnotations'),
            dict(type='Resize', scale=(16, 16), keep_ratio=False),
            dict(type='PackSegInputs')
        ]
    return DATASETS.build(
        dict(
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
    dataset = build(
        tmp_path,
        [dict(type='LoadImageFromFile'), *middle,
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


def test_image_without_mask_is_refused_before_training(tmp_path):
    write_pair(tmp_path, 'ISIC_0000000')
    write_pair(tmp_path, 'ISIC_0000001')
    os.remove(tmp_path / 'annotations/train/ISIC_0000001_segmentation.png')
    with pytest.raises(FileNotFoundError) as err:
        build(tmp_path)
    assert (f'1 of the 2 images in {tmp_path}/images/train have no mask in '
            f"{tmp_path}/annotations/train, e.g. "
            f"['ISIC_0000001_segmentation.png']") in str(err.value)
    shutil.rmtree(tmp_path / 'annotations/train')
    with pytest.raises(FileNotFoundError,
                       match='mask folder .*annotations/train does not exist'):
        build(tmp_path)


def test_mask_without_image_is_named_in_a_warning(tmp_path):
    write_pair(tmp_path, 'ISIC_0000000')
    write_pair(tmp_path, 'ISIC_0000001', image_ext='.png')  # not an image
    # suffix of the split: the pair is left out, and the log says so
    built = []
    message = logged(lambda: built.append(build(tmp_path)))
    assert len(built[0]) == 1
    assert (f'1 masks in {tmp_path}/annotations/train have no image in '
            f'{tmp_path}/images/train') in message
    assert "e.g. ['ISIC_0000001_segmentation.png']" in message


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
    assert {
        osp.splitext(dataset.get_data_info(i)['img_path'])[1]
        for i in range(4)
    } == {'.jpg', '.JPG', '.jpeg', '.JPEG'}
    labels = dataset[1]['data_samples'].gt_sem_seg.data
    assert set(labels.unique().tolist()) == {0, 1}


def convert(download, out, *extra):
    return subprocess.run(
        [sys.executable, CONVERTER,
         str(download), '-o',
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


def write_mask(root, name, mask):
    """Replace the mask of pair ``name`` (written by write_pair)."""
    path = osp.join(root, 'annotations/train', name + '_segmentation.png')
    os.remove(path)
    assert mmcv.imwrite(mask, path)
    return path


def lesion_mask(dtype=np.uint8, lesion=255, channels=None):
    mask = np.zeros((24, 32), dtype)
    mask[4:12, 6:20] = lesion
    if channels:
        mask = np.dstack([mask] * channels)
    return mask


@pytest.mark.parametrize('case,mask,found', [
    ('anti-aliased border', None, '128 (48 pixels)'),
    ('16-bit lesion at 256', lesion_mask(np.uint16, 256), '256 (112 pixels)'),
    ('16-bit full scale', lesion_mask(np.uint16, 65535), '65535'),
    ('both lesion values', None, '1 (56 pixels), 255 (56 pixels)'),
    ('RGB', lesion_mask(channels=3), 'has shape (24, 32, 3)'),
    ('RGBA', lesion_mask(channels=4), 'has shape (24, 32, 4)'),
])
def test_non_binary_mask_is_refused_naming_file_and_values(
        tmp_path, case, mask, found):
    if case == 'anti-aliased border':
        mask = lesion_mask()
        mask[3, 5:21], mask[12, 5:21] = 128, 128
        mask[4:12, 5], mask[4:12, 20] = 128, 128
    elif case == 'both lesion values':
        mask = lesion_mask()
        mask[4:8, 6:20] = 1
    write_pair(tmp_path, 'ISIC_0000000')
    path = write_mask(tmp_path, 'ISIC_0000000', mask)
    dataset = build(tmp_path)
    with pytest.raises(ValueError) as err:
        dataset[0]
    message = str(err.value)
    assert f'mask {path}' in message and found in message


@pytest.mark.parametrize('dtype,lesion', [(np.uint8, 255), (np.uint8, 1),
                                          (np.uint16, 255), (np.uint16, 1)])
def test_binary_masks_of_any_depth_give_the_lesion_class(
        tmp_path, dtype, lesion):
    write_pair(tmp_path, 'ISIC_0000000')
    write_mask(tmp_path, 'ISIC_0000000', lesion_mask(dtype, lesion))
    pipeline = [
        dict(type='LoadImageFromFile'),
        dict(type='LoadAnnotations'),
        dict(type='PackSegInputs')
    ]
    labels = build(tmp_path, pipeline)[0]['data_samples'].gt_sem_seg.data
    assert int((labels == 1).sum()) == 8 * 14
    assert int((labels == 0).sum()) == 24 * 32 - 8 * 14


def test_one_bit_mask_is_read(tmp_path):
    from PIL import Image
    write_pair(tmp_path, 'ISIC_0000000')
    path = write_mask(tmp_path, 'ISIC_0000000', lesion_mask())
    Image.fromarray(lesion_mask() > 0).save(path)  # mode '1'
    pipeline = [
        dict(type='LoadImageFromFile'),
        dict(type='LoadAnnotations'),
        dict(type='PackSegInputs')
    ]
    labels = build(tmp_path, pipeline)[0]['data_samples'].gt_sem_seg.data
    assert int(labels.sum()) == 8 * 14


def pair_names(out, sub, split):
    folder = out / sub / split
    return sorted(os.listdir(folder)) if folder.exists() else []


@pytest.mark.parametrize('mode', [[], ['--copy']])
def test_converter_output_mirrors_the_download(tmp_path, mode):
    dl, out = tmp_path / 'dl', tmp_path / 'out'
    for i in range(3):
        write_pair(dl, f'ISIC_000000{i}', dirs=TRAIN_DIRS)
    write_pair(dl, 'ISIC_0000010', dirs=VAL_DIRS)
    assert convert(dl, out, *mode).returncode == 0
    assert len(pair_names(out, 'images', 'train')) == 3
    # A pair moves from training to validation, another is withdrawn.
    for src, dst in zip(TRAIN_DIRS, VAL_DIRS):
        for name in os.listdir(dl / src):
            if name.startswith('ISIC_0000001'):
                os.rename(dl / src / name, dl / dst / name)
            if name.startswith('ISIC_0000002'):
                os.remove(dl / src / name)
    (out / 'images/train/notes').mkdir()  # an earlier layout's leftovers
    done = convert(dl, out, *mode)
    assert done.returncode == 0, done.stderr
    assert 'removed 5 files no longer in the download' in done.stdout
    assert pair_names(out, 'images', 'train') == ['ISIC_0000000.jpg']
    assert pair_names(out, 'annotations',
                      'train') == ['ISIC_0000000_segmentation.png']
    assert pair_names(out, 'images',
                      'val') == ['ISIC_0000001.jpg', 'ISIC_0000010.jpg']
    assert len(build(out)) == 1 and len(build(out, split='val')) == 2
    # A split gone from the download is gone from the output.
    shutil.rmtree(dl / VAL_DIRS[0]), shutil.rmtree(dl / VAL_DIRS[1])
    done = convert(dl, out, *mode)
    assert done.returncode == 0, done.stderr
    assert not (out / 'images/val').exists()
    assert not (out / 'annotations/val').exists()


def test_converter_refuses_an_image_in_two_splits(tmp_path):
    dl = tmp_path / 'dl'
    write_pair(dl, 'ISIC_0000000', dirs=TRAIN_DIRS)
    write_pair(dl, 'ISIC_0000001', dirs=TRAIN_DIRS)
    write_pair(dl, 'ISIC_0000001', dirs=VAL_DIRS)
    done = convert(dl, tmp_path / 'out')
    assert done.returncode != 0
    assert 'ISIC_0000001 in train and val' in done.stderr
    assert not (tmp_path / 'out').exists()  # nothing written
