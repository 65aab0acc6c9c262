"""Arrange the official ISIC-2018 Task 1 downloads for ``ISIC2018Dataset``.

The challenge publishes, per split, one folder of images and one of
ground-truth masks::

    ISIC2018_Task1-2_Training_Input/ISIC_0000000.jpg
    ISIC2018_Task1_Training_GroundTruth/ISIC_0000000_segmentation.png
    ISIC2018_Task1-2_Validation_Input/...
    ISIC2018_Task1_Validation_GroundTruth/...
    ISIC2018_Task1-2_Test_Input/...
    ISIC2018_Task1_Test_GroundTruth/...

This tool links (or copies) them into::

    OUT/images/{train,val,test}/ISIC_*.jpg
    OUT/annotations/{train,val,test}/ISIC_*_segmentation.png

Masks are kept as published (0 / 255); the dataset maps 255 to class 1.
Images without a mask (and the reverse) are reported and skipped; a split
whose folders hold no pair is an error, and so is an image id found in two
splits (training data would leak into evaluation). Images may end in
``.jpg`` or ``.jpeg`` in any letter case.

Every run makes ``OUT`` mirror the download, in link and copy mode alike:
copies whose source changed (size or time) are copied again, links are
pointed at their source, and whatever ``OUT/{images,annotations}/<split>``
holds beyond this run's pairs (a pair since moved to another split or
removed, a file of an earlier layout) is deleted, as are the folders of a
split the download no longer has. Those folders belong to the tool: keep
nothing else in them.

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


def pair_split(src, split, image_dir, mask_dir):
    """``{stem: (image name, mask name)}`` of a split's image/mask pairs
    (the unpaired files reported)."""
    images = list_split(osp.join(src, image_dir), IMAGE_SUFFIXES)
    masks = list_split(osp.join(src, mask_dir), (MASK_SUFFIX, ))
    for missing, what in ((images.keys() - masks.keys(), 'mask'),
                          (masks.keys() - images.keys(), 'image')):
        if missing:
            print(
                f'[{split}] {len(missing)} without a {what}, skipped: '
                f'{", ".join(sorted(missing)[:5])}...', file=sys.stderr)
    return {
        stem: (images[stem], masks[stem])
        for stem in sorted(images.keys() & masks.keys())
    }


def remove_entry(path):
    """Delete a file, link or folder (a link is removed, not followed)."""
    if osp.isdir(path) and not osp.islink(path):
        shutil.rmtree(path)
    else:
        os.remove(path)


def prune(folder, keep):
    """Delete what ``folder`` holds besides the names ``keep``; returns
    how many entries went."""
    if not osp.isdir(folder):
        return 0
    stale = sorted(set(os.listdir(folder)) - set(keep))
    for name in stale:
        remove_entry(osp.join(folder, name))
    return len(stale)


def convert_split(src, out, split, image_dir, mask_dir, pairs, copy):
    """Place one split's ``pairs`` (as :func:`pair_split`) and delete what
    else its output folders hold; returns the number of pairs."""
    outputs = {'images': {}, 'annotations': {}}
    for stem, (image, mask) in pairs.items():
        # Images keep their name (the dataset reads any letter case);
        # masks get the name the dataset derives from the image's.
        outputs['images'][image] = osp.join(src, image_dir, image)
        outputs['annotations'][stem + MASK_SUFFIX] = osp.join(
            src, mask_dir, mask)
    removed = sum(
        prune(osp.join(out, sub, split), outputs[sub]) for sub in outputs)
    if removed:
        print(f'[{split}] removed {removed} files no longer in the '
              f'download')
    if not pairs:
        return 0
    changed = done = 0
    for sub in outputs:
        os.makedirs(osp.join(out, sub, split), exist_ok=True)
    for image, mask in zip(outputs['images'].items(),
                           outputs['annotations'].items()):
        for sub, (dname, source) in zip(outputs, (image, mask)):
            changed += place(osp.abspath(source),
                             osp.join(out, sub, split, dname), copy)
        done += 1
        if done % 200 == 0 or done == len(pairs):
            print(f'\r[{split}] {done}/{len(pairs)}', end='', flush=True)
    print(f' ({changed} files written or updated)')
    return len(pairs)


def shared_ids(paired):
    """Image ids that more than one split holds: ``{stem: [splits]}``."""
    seen = {}
    for split, pairs in paired.items():
        for stem in pairs:
            seen.setdefault(stem, []).append(split)
    return {stem: splits for stem, splits in seen.items() if len(splits) > 1}


def main(argv=None):
    parser = argparse.ArgumentParser(
        description='Arrange ISIC-2018 Task 1 for ISIC2018Dataset.')
    parser.add_argument('download_dir',
                        help='folder holding the official split folders')
    parser.add_argument('-o', '--out-dir', default='data/ISIC2018')
    parser.add_argument('--copy', action='store_true',
                        help='copy files instead of symlinking them')
    args = parser.parse_args(argv)
    paired, absent = {}, []
    for split, (image_dir, mask_dir) in SPLITS.items():
        if not (osp.isdir(osp.join(args.download_dir, image_dir))
                and osp.isdir(osp.join(args.download_dir, mask_dir))):
            print(f'[{split}] {image_dir} / {mask_dir} not found, skipped')
            absent.append(split)
            continue
        paired[split] = pair_split(args.download_dir, split, image_dir,
                                   mask_dir)
    if not paired:
        parser.error(f'no ISIC-2018 Task 1 split found in {args.download_dir}')
    shared = shared_ids(paired)
    if shared:
        shown = '; '.join(f'{stem} in {" and ".join(splits)}'
                          for stem, splits in sorted(shared.items())[:5])
        parser.error(f'{len(shared)} image ids are in more than one split '
                     f'of {args.download_dir} ({shown}): a sample in two '
                     f'splits leaks training data into evaluation; remove '
                     f'the extra copies')
    for split in absent:
        # Mirror the download: a split it lacks has no output either.
        removed = [
            osp.join(args.out_dir, sub, split)
            for sub in ('images', 'annotations')
            if osp.lexists(osp.join(args.out_dir, sub, split))
        ]
        for path in removed:
            remove_entry(path)
        if removed:
            print(f'[{split}] removed {", ".join(removed)} (not in the '
                  f'download)')
    found, empty = 0, []
    for split, pairs in paired.items():
        image_dir, mask_dir = SPLITS[split]
        count = convert_split(args.download_dir, args.out_dir, split,
                              image_dir, mask_dir, pairs, args.copy)
        if not count:
            empty.append(
                f'[{split}] no image/mask pair in '
                f'{osp.join(args.download_dir, image_dir)} and '
                f'{osp.join(args.download_dir, mask_dir)} (expected '
                f'ISIC_*{"/".join(IMAGE_SUFFIXES)} and ISIC_*{MASK_SUFFIX}):'
                f' an empty or incomplete download?')
        found += count
    print(f'{found} image/mask pairs under {args.out_dir}')
    if empty:
        # The split's folders exist, so it was meant to be there: its
        # dataloader would fail later, far from the cause.
        print('\n'.join(empty), file=sys.stderr)
        sys.exit(1)


if __name__ == '__main__':
    main()
