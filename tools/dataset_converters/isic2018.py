"""Arrange the official ISIC-2018 Task 1 downloads for ``ISIC2018Dataset``.

The challenge publishes, per split, one folder of images and one of
ground-truth masks::

    ISIC2018_Task1-2_Training_Input/ISIC_0000000.jpg
    ISIC2018_Task1_Training_GroundTruth/ISIC_0000000_segmentation.png
    ISIC2018_Task1-2_Validation_Input/...   ISIC2018_Task1_Validation_GroundTruth/...
    ISIC2018_Task1-2_Test_Input/...         ISIC2018_Task1_Test_GroundTruth/...

This tool links (or copies) them into::

    OUT/images/{train,val,test}/ISIC_*.jpg
    OUT/annotations/{train,val,test}/ISIC_*_segmentation.png

Masks are kept as published (0 / 255); the dataset maps 255 to class 1.
Images without a mask (and the reverse) are reported and skipped.

    python tools/dataset_converters/isic2018.py DOWNLOAD_DIR -o data/ISIC2018
"""
import argparse
import os
import os.path as osp
import shutil
import sys

SPLITS = {
    'train': ('ISIC2018_Task1-2_Training_Input',
              'ISIC2018_Task1_Training_GroundTruth'),
    'val': ('ISIC2018_Task1-2_Validation_Input',
            'ISIC2018_Task1_Validation_GroundTruth'),
    'test': ('ISIC2018_Task1-2_Test_Input', 'ISIC2018_Task1_Test_GroundTruth'),
}
MASK_SUFFIX = '_segmentation.png'


def convert_split(src, out, split, image_dir, mask_dir, copy):
    images = {f[:-4] for f in os.listdir(osp.join(src, image_dir))
              if f.endswith('.jpg')}
    masks = {f[:-len(MASK_SUFFIX)] for f in os.listdir(osp.join(src, mask_dir))
             if f.endswith(MASK_SUFFIX)}
    paired = sorted(images & masks)
    for missing, what in ((images - masks, 'mask'), (masks - images, 'image')):
        if missing:
            print(f'[{split}] {len(missing)} without a {what}, skipped: '
                  f'{", ".join(sorted(missing)[:5])}...', file=sys.stderr)
    place = shutil.copy2 if copy else os.symlink
    for sub in ('images', 'annotations'):
        os.makedirs(osp.join(out, sub, split), exist_ok=True)
    for i, name in enumerate(paired, 1):
        for sub, folder, fname in (('images', image_dir, name + '.jpg'),
                                   ('annotations', mask_dir,
                                    name + MASK_SUFFIX)):
            dst = osp.join(out, sub, split, fname)
            if not osp.lexists(dst):
                place(osp.abspath(osp.join(src, folder, fname)), dst)
        if i % 200 == 0 or i == len(paired):
            print(f'\r[{split}] {i}/{len(paired)}', end='', flush=True)
    print()
    return len(paired)


def main(argv=None):
    parser = argparse.ArgumentParser(
        description='Arrange ISIC-2018 Task 1 for ISIC2018Dataset.')
    parser.add_argument('download_dir',
                        help='folder holding the official split folders')
    parser.add_argument('-o', '--out-dir', default='data/ISIC2018')
    parser.add_argument('--copy', action='store_true',
                        help='copy files instead of symlinking them')
    args = parser.parse_args(argv)
    found = 0
    for split, (image_dir, mask_dir) in SPLITS.items():
        if not (osp.isdir(osp.join(args.download_dir, image_dir))
                and osp.isdir(osp.join(args.download_dir, mask_dir))):
            print(f'[{split}] {image_dir} / {mask_dir} not found, skipped')
            continue
        found += convert_split(args.download_dir, args.out_dir, split,
                               image_dir, mask_dir, args.copy)
    if not found:
        parser.error(f'no ISIC-2018 Task 1 split found in {args.download_dir}')
    print(f'{found} image/mask pairs under {args.out_dir}')


if __name__ == '__main__':
    main()
