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
Images without a mask (and the reverse) are reported and skipped; a split
whose folders hold no pair is an error. Images may end in ``.jpg`` or
``.jpeg`` in any letter case. Running again brings ``OUT`` up to date: with
``--copy``, copies whose source changed (size or time) are copied again.

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
#: Image suffixes of the release, matched in any letter case.
IMAGE_SUFFIXES = ('.jpg', '.jpeg')


def list_split(folder, suffixes):
    """``{stem: file name}`` of the files in ``folder`` ending (in any
    letter case) in one of ``suffixes``."""
    found = {}
    for name in os.listdir(folder):
        lower = name.lower()
        for suffix in suffixes:
            if lower.endswith(suffix):
                found[name[:-len(suffix)]] = name
                break
    return found


def place(src, dst, copy):
    """Link or copy ``src`` to ``dst``; returns whether ``dst`` changed.

    An existing copy is replaced when its size or modification time differ
    from the source's (a corrected mask), a link when it points elsewhere,
    and either when the other mode made it.
    """
    if copy:
        if osp.lexists(dst) and not osp.islink(dst):
            have, want = os.stat(dst), os.stat(src)
            if (have.st_size, have.st_mtime_ns) == (want.st_size,
                                                    want.st_mtime_ns):
                return False
        if osp.lexists(dst):
            os.remove(dst)
        shutil.copy2(src, dst)  # keeps the mtime the next run compares
        return True
    if osp.islink(dst) and os.readlink(dst) == src:
        return False
    if osp.lexists(dst):
        os.remove(dst)
    os.symlink(src, dst)
    return True


def convert_split(src, out, split, image_dir, mask_dir, copy):
    """Place the image/mask pairs of one split; returns their number."""
    images = list_split(osp.join(src, image_dir), IMAGE_SUFFIXES)
    masks = list_split(osp.join(src, mask_dir), (MASK_SUFFIX, ))
    paired = sorted(images.keys() & masks.keys())
    for missing, what in ((images.keys() - masks.keys(), 'mask'),
                          (masks.keys() - images.keys(), 'image')):
        if missing:
            print(f'[{split}] {len(missing)} without a {what}, skipped: '
                  f'{", ".join(sorted(missing)[:5])}...', file=sys.stderr)
    if not paired:
        return 0
    for sub in ('images', 'annotations'):
        os.makedirs(osp.join(out, sub, split), exist_ok=True)
    changed = 0
    for i, name in enumerate(paired, 1):
        # Images keep their name (the dataset reads any letter case);
        # masks get the name the dataset derives from the image's.
        for sub, folder, fname, dname in (
                ('images', image_dir, images[name], images[name]),
                ('annotations', mask_dir, masks[name], name + MASK_SUFFIX)):
            changed += place(osp.abspath(osp.join(src, folder, fname)),
                             osp.join(out, sub, split, dname), copy)
        if i % 200 == 0 or i == len(paired):
            print(f'\r[{split}] {i}/{len(paired)}', end='', flush=True)
    print(f' ({changed} files written or updated)')
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
    found, empty = 0, []
    for split, (image_dir, mask_dir) in SPLITS.items():
        if not (osp.isdir(osp.join(args.download_dir, image_dir))
                and osp.isdir(osp.join(args.download_dir, mask_dir))):
            print(f'[{split}] {image_dir} / {mask_dir} not found, skipped')
            continue
        pairs = convert_split(args.download_dir, args.out_dir, split,
                              image_dir, mask_dir, args.copy)
        if not pairs:
            empty.append(
                f'[{split}] no image/mask pair in '
                f'{osp.join(args.download_dir, image_dir)} and '
                f'{osp.join(args.download_dir, mask_dir)} (expected '
                f'ISIC_*{"/".join(IMAGE_SUFFIXES)} and ISIC_*{MASK_SUFFIX}):'
                f' an empty or incomplete download?')
        found += pairs
    if not found and not empty:
        parser.error(f'no ISIC-2018 Task 1 split found in {args.download_dir}')
    print(f'{found} image/mask pairs under {args.out_dir}')
    if empty:
        # The split's folders exist, so it was meant to be there: its
        # dataloader would fail later, far from the cause.
        print('\n'.join(empty), file=sys.stderr)
        sys.exit(1)


if __name__ == '__main__':
    main()
