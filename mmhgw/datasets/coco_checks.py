"""COCO annotations checked when mmdet's ``CocoDataset`` loads them.

mmdet reads an annotation file trusting its fields: a missing ``bbox`` or
``area`` fails with a bare ``KeyError: 'bbox'``, and an instance whose
``"segmentation"`` is empty (``[]``) or missing is kept without a mask, so
that a pipeline loading masks fails later, one sample at a time, with
``KeyError: 'mask'`` naming neither file nor annotation. Importing mmhgw
wraps ``CocoDataset.parse_data_info`` (and so its subclasses') with
:func:`check_coco_annotations`: such annotations fail at dataset load,
naming the annotation file, the annotation id, the image and the field.
What mmdet handles itself keeps its behaviour: annotations it skips
(``ignore``, empty boxes, other categories) are not checked further, and
polygons too short to draw still make their instance ignored.
"""
import functools
import numbers

#: Fields ``CocoDataset.parse_data_info`` reads from every annotation.
REQUIRED = ('bbox', 'area', 'category_id')


class CocoAnnotationError(ValueError):
    """A malformed annotation; the message names file, annotation, field."""


def _is_number(value) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _segmentation_problem(seg):
    """Why ``seg`` is no instance mask, or None if it is one (polygons:
    a list of coordinate lists; RLE: a dict with ``counts`` and ``size``)."""
    if seg is None:
        return 'has no "segmentation"'
    if isinstance(seg, dict):
        return None  # RLE; mmdet ignores one without counts / size
    if not isinstance(seg, list):
        return f'has a "segmentation" of type {type(seg).__name__}'
    if not seg:
        return 'has an empty "segmentation": []'
    # The form, not every coordinate: COCO has ~860k annotations.
    if not all(
            isinstance(p, (list, tuple)) and (not p or _is_number(p[0]))
            for p in seg):
        return ('has a "segmentation" that is not a list of polygons '
                '(lists of numbers)')
    return None


def loads_masks(dataset) -> bool:
    """Whether ``dataset``'s pipeline loads instance masks."""
    transforms = getattr(getattr(dataset, 'pipeline', None), 'transforms',
                         None) or []
    return any(getattr(t, 'with_mask', False) for t in transforms)


def check_coco_annotations(dataset, raw_data_info: dict, with_mask: bool):
    """Refuse the malformed annotations of one image of ``dataset`` (its
    ``raw_data_info`` as ``CocoDataset.load_data_list`` passes it)."""
    img = raw_data_info.get('raw_img_info') or {}
    image = (f'image {img.get("file_name")!r} (id '
             f'{img.get("img_id", img.get("id"))})')
    for ann in raw_data_info.get('raw_ann_info') or []:
        if not isinstance(ann, dict):
            raise CocoAnnotationError(
                f'{dataset.ann_file}: an annotation of {image} is a '
                f'{type(ann).__name__}, not an object')
        if ann.get('ignore', False):
            continue
        where = (f'{dataset.ann_file}: annotation id {ann.get("id")} of '
                 f'{image}')
        for field in REQUIRED:
            if field not in ann:
                raise CocoAnnotationError(f'{where} has no "{field}"')
        bbox = ann['bbox']
        if not (isinstance(bbox, (list, tuple)) and len(bbox) == 4
                and all(map(_is_number, bbox))):
            raise CocoAnnotationError(
                f'{where} has "bbox": {bbox!r}; expected [x, y, width, '
                f'height]')
        if not _is_number(ann['area']):
            raise CocoAnnotationError(
                f'{where} has "area": {ann["area"]!r}; expected a number')
        if not with_mask or ann['category_id'] not in dataset.cat_ids:
            continue
        x, y, w, h = bbox
        inside_w = min(x + w, img.get('width', x + w)) - max(x, 0)
        inside_h = min(y + h, img.get('height', y + h)) - max(y, 0)
        if ann['area'] <= 0 or w < 1 or h < 1 or inside_w <= 0 or \
                inside_h <= 0:
            continue  # mmdet skips it
        problem = _segmentation_problem(ann.get('segmentation'))
        if problem:
            raise CocoAnnotationError(
                f'{where} {problem}; the pipeline loads instance masks, '
                f'which need polygons [[x1, y1, x2, y2, ...], ...] or an '
                f'RLE {{"counts": ..., "size": [height, width]}}')


#: Fields pycocotools indexes every annotation and image by.
INDEXED = {
    'annotations': ('id', 'image_id', 'category_id'), 'images': ('id', ),
    'categories': ('id', )
}


def _unindexable(ann_file: str, err: Exception) -> str:
    """Which entry of ``ann_file`` lacks a field pycocotools indexes by
    (read again, on the error path only)."""
    import json
    try:
        with open(ann_file) as f:
            content = json.load(f)
    except Exception:  # noqa: BLE001  (remote or unreadable: say less)
        return f'{type(err).__name__}: {err}'
    for section, fields in INDEXED.items():
        for i, entry in enumerate(content.get(section) or []):
            entry_id = entry.get('id') if isinstance(entry, dict) else None
            for field in fields:
                if not isinstance(entry, dict) or field not in entry:
                    return f'{section}[{i}] (id {entry_id}) has no "{field}"'
    return f'{type(err).__name__}: {err}'


def install_coco_checks():
    """Wrap mmdet's ``CocoDataset.parse_data_info`` with
    :func:`check_coco_annotations` (idempotent; nothing without mmdet)."""
    try:
        from mmdet.datasets import CocoDataset
    except ImportError:
        return
    parse = CocoDataset.parse_data_info
    if getattr(parse, 'mmhgw_checked', False):
        return

    @functools.wraps(parse)
    def parse_data_info(self, raw_data_info):
        check_coco_annotations(self, raw_data_info, loads_masks(self))
        return parse(self, raw_data_info)

    load = CocoDataset.load_data_list

    @functools.wraps(load)
    def load_data_list(self):
        try:
            return load(self)
        except (KeyError, TypeError) as err:
            # pycocotools indexing the file: "KeyError: 'category_id'".
            raise CocoAnnotationError(
                f'{self.ann_file}: not COCO annotations pycocotools can '
                f'index: {_unindexable(self.ann_file, err)}') from err

    parse_data_info.mmhgw_checked = True
    CocoDataset.parse_data_info = parse_data_info
    CocoDataset.load_data_list = load_data_list
