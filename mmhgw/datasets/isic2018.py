"""ISIC-2018 Task 1 (lesion boundary segmentation) for MMSegmentation."""
import logging
import os.path as osp
from typing import Sequence, Union

import numpy as np

from mmhgw.registry import SEG_DATASETS, SEG_TRANSFORMS

__all__ = []

#: Official ground-truth masks mark the lesion with 255 and the rest with 0.
LESION_VALUE = 255

#: Image suffixes of the official release (matched in any letter case).
IMAGE_SUFFIXES = ('.jpg', '.jpeg')


def _size(shape) -> str:
    return f'{shape[1]}x{shape[0]}'


#: The lesion values a binary mask may use (with 0 for background).
LESION_VALUES = (LESION_VALUE, 1)


def binary_lesion_mask(mask: np.ndarray, path: str) -> np.ndarray:
    """A lesion mask as read from ``path`` (any bit depth), checked and
    returned as published: uint8, 0 background, 255 lesion.

    Accepted: a single channel (H x W, or H x W x 1) of any integer, bool
    or float type holding 0 and one lesion value, 255 or 1. Anything else
    raises ``ValueError`` naming the file and the values found: more
    channels (an RGB mask), other values (an anti-aliased border of 128, a
    16-bit mask marking the lesion 256, which a cast to uint8 would turn
    into background), or both 1 and 255.
    """
    if mask.ndim == 3 and mask.shape[2] == 1:
        mask = mask[..., 0]
    if mask.ndim != 2:
        raise ValueError(
            f'mask {path} has shape {mask.shape}: a single-channel '
            f'(grayscale) mask of 0 (background) and 255 or 1 (lesion) is '
            f'expected, not a colour image')
    if mask.dtype == bool:
        return mask.astype(np.uint8) * LESION_VALUE
    lesion = mask != 0
    values = mask[lesion]
    if values.size:
        low, high = values.min(), values.max()
        if not (low == high and low in LESION_VALUES):
            found, counts = np.unique(values, return_counts=True)
            order = np.argsort(-counts)[:6]
            shown = ', '.join(f'{found[i].item()!r} ({counts[i]} pixels)'
                              for i in order)
            more = len(found) - len(order)
            raise ValueError(
                f'mask {path} ({mask.dtype}) is not binary: besides 0 it '
                f'holds {shown}{f" and {more} more values" if more else ""}'
                f'. Expected 0 (background) and one lesion value, 255 or '
                f'1; binarise the mask (e.g. lesion where >= half the '
                f'maximum) before use')
    return lesion.astype(np.uint8) * LESION_VALUE


if SEG_DATASETS is not None:
    import mmcv
    from mmcv.transforms import BaseTransform
    from mmengine import fileio
    from mmseg.datasets import BaseSegDataset
    from mmseg.datasets.transforms import LoadAnnotations

    @SEG_TRANSFORMS.register_module()
    class CheckSegMapSize(BaseTransform):
        """Refuses a sample whose mask is not the size of its image.

        Placed right after ``LoadAnnotations``: it compares the mask as
        read with the image as read (``ori_shape``), whatever transforms
        ran between. A later resize would otherwise stretch the mask to the
        image and train on misaligned labels without a word.
        """

        def transform(self, results: dict) -> dict:
            seg = results.get('gt_seg_map')
            shape = results.get('ori_shape')
            if seg is not None and shape is not None and \
                    tuple(seg.shape[:2]) != tuple(shape[:2]):
                raise ValueError(
                    f'mask {results.get("seg_map_path")} is '
                    f'{_size(seg.shape)} (WxH) but its image '
                    f'{results.get("img_path")} is {_size(shape)}: they '
                    f'must have the same size')
            return results

    @SEG_TRANSFORMS.register_module()
    class LoadISICAnnotations(LoadAnnotations):
        """mmseg's ``LoadAnnotations`` for binary lesion masks: the mask is
        read at its own bit depth and checked by :func:`binary_lesion_mask`
        before anything is cast (mmseg casts to uint8 first, so a 16-bit
        value 256 becomes 0), then mapped by the dataset's ``label_map``
        as mmseg does."""

        def _load_seg_map(self, results: dict) -> None:
            path = results['seg_map_path']
            raw = mmcv.imfrombytes(
                fileio.get(path, backend_args=self.backend_args),
                flag='unchanged', backend=self.imdecode_backend)
            if raw is None:
                raise ValueError(f'cannot read mask {path}')
            seg = binary_lesion_mask(raw, path)
            if self.reduce_zero_label or results.get('reduce_zero_label'):
                raise ValueError(
                    'reduce_zero_label does not apply to binary lesion '
                    'masks: 0 is the background class')
            label_map = results.get('label_map') or {}
            mapped = seg.copy()
            for old_id, new_id in label_map.items():
                mapped[seg == old_id] = new_id
            results['gt_seg_map'] = mapped
            results['seg_fields'].append('gt_seg_map')

    @SEG_DATASETS.register_module()
    class ISIC2018Dataset(BaseSegDataset):
        """ISIC-2018 Task 1: dermoscopic ``.jpg`` images and binary masks
        ``<image id>_segmentation.png``.

        The official masks hold 0 (background) and 255 (lesion); 255 is also
        mmseg's ignore index, so the dataset maps it to class 1 through
        ``label_map`` (applied by mmseg's ``LoadAnnotations``): masks are
        read as published, no rewritten copy is needed. Layout, as written
        by ``tools/dataset_converters/isic2018.py``::

            data_root/images/{train,val,test}/ISIC_0000000.jpg
            data_root/annotations/{train,val,test}/ISIC_0000000_segmentation.png

        Bad data fails clearly rather than training quietly: a split
        without images names its folder; a mask whose size differs from
        its image's names both files and sizes (:class:`CheckSegMapSize`,
        put after every ``LoadAnnotations`` of the pipeline); a mask that
        is not binary (values other than 0 and 255 or 1, several channels)
        names the file and the values (the pipeline's ``LoadAnnotations``
        become :class:`LoadISICAnnotations`); an unreadable image or mask
        is named.

        Args:
            img_suffix: image suffix, or several; matched in any letter case
                (``.JPG`` too). With an ``ann_file`` (image names without
                suffix) the first existing file of these suffixes is used.
            seg_map_suffix: what replaces the image suffix in a mask's name.
            reduce_zero_label: as mmseg's datasets (no: 0 is background).
            check_mask_size: insert :class:`CheckSegMapSize` after each
                ``LoadAnnotations`` of the pipeline.
            check_mask_values: load masks with :class:`LoadISICAnnotations`
                (replacing mmseg's ``LoadAnnotations`` in the pipeline).
            **kwargs: ``BaseSegDataset``'s arguments.
        """
        METAINFO = dict(classes=('background', 'lesion'),
                        palette=[[0, 0, 0], [255, 255, 255]])

        def __init__(self, img_suffix: Union[str,
                                             Sequence[str]] = IMAGE_SUFFIXES,
                     seg_map_suffix: str = '_segmentation.png',
                     reduce_zero_label: bool = False,
                     check_mask_size: bool = True,
                     check_mask_values: bool = True, **kwargs):
            suffixes = (img_suffix, ) if isinstance(img_suffix, str) \
                else tuple(img_suffix)
            if not suffixes or not all(
                    isinstance(s, str) and s for s in suffixes):
                raise ValueError(f'img_suffix must be a non-empty suffix or '
                                 f'sequence of them, got {img_suffix!r}')
            self.img_suffixes = suffixes
            super().__init__(img_suffix=suffixes[0],
                             seg_map_suffix=seg_map_suffix,
                             reduce_zero_label=reduce_zero_label, **kwargs)
            transforms = self.pipeline.transforms
            for i in reversed(range(len(transforms))):
                load = transforms[i]
                if not isinstance(load, LoadAnnotations):
                    continue
                if check_mask_values and type(load) is LoadAnnotations:
                    transforms[i] = LoadISICAnnotations(
                        reduce_zero_label=load.reduce_zero_label,
                        backend_args=load.backend_args,
                        imdecode_backend=load.imdecode_backend)
                if check_mask_size:
                    transforms.insert(i + 1, CheckSegMapSize())

        @classmethod
        def get_label_map(cls, new_classes=None):
            label_map = super().get_label_map(new_classes) or {}
            label_map.setdefault(0, 0)
            label_map[LESION_VALUE] = label_map.pop(1, 1)
            return label_map

        def _image_stem(self, name: str):
            """``name`` without its image suffix, or None if it has none."""
            lower = name.lower()
            for suffix in self.img_suffixes:
                if lower.endswith(suffix.lower()):
                    return name[:-len(suffix)]
            return None

        def _info(self, img_path: str, stem: str) -> dict:
            ann_dir = self.data_prefix.get('seg_map_path', None)
            info = dict(img_path=img_path, label_map=self.label_map,
                        reduce_zero_label=self.reduce_zero_label,
                        seg_fields=[])
            if ann_dir is not None:
                info['seg_map_path'] = osp.join(ann_dir,
                                                stem + self.seg_map_suffix)
            return info

        def load_data_list(self):
            img_dir = self.data_prefix.get('img_path', None)
            wanted = '/'.join(self.img_suffixes)
            if self.ann_file and not osp.isdir(self.ann_file):
                data_list = []
                for line in fileio.list_from_file(
                        self.ann_file, backend_args=self.backend_args):
                    stem = line.strip()
                    if not stem:
                        continue
                    candidates = [
                        osp.join(img_dir, stem + s)
                        for suffix in self.img_suffixes
                        for s in (suffix, suffix.upper())
                    ]
                    found = [
                        p for p in candidates
                        if fileio.exists(p, self.backend_args)
                    ]
                    if not found:
                        raise FileNotFoundError(
                            f'{self.ann_file} lists {stem!r}, but no image '
                            f'{stem}{{{wanted}}} is in {img_dir}')
                    data_list.append(self._info(found[0], stem))
                source = f'{self.ann_file} (images in {img_dir})'
            else:
                if img_dir is None or not fileio.isdir(img_dir,
                                                       self.backend_args):
                    raise FileNotFoundError(
                        f'{type(self).__name__}: image folder {img_dir} '
                        f'does not exist (data_root + '
                        f'data_prefix.img_path)')
                data_list = []
                for name in fileio.list_dir_or_file(
                        dir_path=img_dir, list_dir=False, recursive=True,
                        backend_args=self.backend_args):
                    stem = self._image_stem(name)
                    if stem is not None:
                        data_list.append(
                            self._info(osp.join(img_dir, name), stem))
                data_list.sort(key=lambda x: x['img_path'])
                source = img_dir
            if not data_list:
                raise FileNotFoundError(
                    f'{type(self).__name__}: no images ({wanted}, any '
                    f'letter case) in {source}: an empty split')
            self._check_pairs(data_list, source,
                              whole_folder=source == img_dir)
            return data_list

        def _check_pairs(self, data_list, source, whole_folder):
            """Every image has its mask (checked before training starts
            rather than when the loader meets the image, mid-run), and,
            where the split is the whole image folder, every mask an image:
            a mask left over is an image of another suffix or name, which
            would be left out of the split without a word."""
            ann_dir = self.data_prefix.get('seg_map_path', None)
            if ann_dir is None:
                return
            if not fileio.isdir(ann_dir, self.backend_args):
                raise FileNotFoundError(
                    f'{type(self).__name__}: mask folder {ann_dir} does not '
                    f'exist (data_root + data_prefix.seg_map_path)')
            masks = set(
                fileio.list_dir_or_file(dir_path=ann_dir, list_dir=False,
                                        suffix=self.seg_map_suffix,
                                        recursive=True,
                                        backend_args=self.backend_args))
            wanted = [
                osp.relpath(info['seg_map_path'], ann_dir)
                for info in data_list
            ]
            missing = [m for m in wanted if m not in masks]
            if missing:
                raise FileNotFoundError(
                    f'{len(missing)} of the {len(wanted)} images in {source} '
                    f'have no mask in {ann_dir}, e.g. {missing[:3]}')
            extra = sorted(masks - set(wanted)) if whole_folder else []
            if extra:
                from mmengine.logging import print_log
                print_log(
                    f'{len(extra)} masks in {ann_dir} have no image in '
                    f'{source} ({"/".join(self.img_suffixes)}, any letter '
                    f'case), e.g. {extra[:3]}: those pairs are left out',
                    logger='current', level=logging.WARNING)

        def prepare_data(self, idx):
            try:
                return super().prepare_data(idx)
            except Exception as err:
                # Name the file that cannot be read: the stock transforms
                # fail on a corrupt mask with an error that names none.
                info = self.get_data_info(idx)
                for what, key, flag in (('image', 'img_path', 'color'),
                                        ('mask', 'seg_map_path', 'unchanged')):
                    path = info.get(key)
                    if path is None:
                        continue
                    try:
                        ok = mmcv.imfrombytes(
                            fileio.get(path, backend_args=self.backend_args),
                            flag=flag) is not None
                    except Exception:
                        ok = False
                    if not ok:
                        raise ValueError(
                            f'cannot read {what} {path}: a missing, corrupt '
                            f'or truncated file ({type(err).__name__}: '
                            f'{err})') from err
                raise

    __all__ += ['ISIC2018Dataset', 'CheckSegMapSize', 'LoadISICAnnotations']
