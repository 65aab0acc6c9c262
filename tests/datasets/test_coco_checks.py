"""Malformed COCO annotations fail when mmdet's CocoDataset loads them,
naming the annotation file, the annotation and the field."""
import json

import pytest
from mmengine.registry import init_default_scope

import mmhgw  # noqa: F401
from mmhgw.datasets.synthetic import make_coco_instances

WITH_MASKS = [
    dict(type='LoadImageFromFile'),
    dict(type='LoadAnnotations', with_bbox=True, with_mask=True),
    dict(type='PackDetInputs')
]
BOXES_ONLY = [
    dict(type='LoadImageFromFile'),
    dict(type='LoadAnnotations', with_bbox=True),
    dict(type='PackDetInputs')
]


@pytest.fixture(scope='module')
def coco(tmp_path_factory):
    root = tmp_path_factory.mktemp('coco')
    metainfo = make_coco_instances(str(root), num_train=3, num_val=1,
                                   size=(48, 64))
    with open(root / 'annotations' / 'instances_train2017.json') as f:
        return root, metainfo, json.load(f)


def build(root, metainfo, content, pipeline, name='edited.json'):
    path = root / 'annotations' / name
    path.write_text(json.dumps(content))
    init_default_scope('mmdet')
    from mmdet.registry import DATASETS
    return DATASETS.build(
        dict(type='CocoDataset', data_root=str(root), ann_file=str(path),
             data_prefix=dict(img='train2017/'), metainfo=metainfo,
             filter_cfg=dict(filter_empty_gt=False), pipeline=pipeline)), path


def edited(content, **fields):
    """``content`` with the fields of its first annotation replaced (a
    value None removes the field)."""
    content = json.loads(json.dumps(content))
    ann = content['annotations'][0]
    for key, value in fields.items():
        if value is None:
            ann.pop(key)
        else:
            ann[key] = value
    return content, ann


@pytest.mark.parametrize('fields,what', [
    (dict(segmentation=[]), 'has an empty "segmentation": []'),
    (dict(segmentation=None), 'has no "segmentation"'),
    (dict(segmentation='polygon'), 'a "segmentation" of type str'),
    (dict(segmentation=[['a', 'b']]), 'not a list of polygons'),
])
def test_unusable_mask_is_named_when_masks_are_loaded(coco, fields, what):
    root, metainfo, content = coco
    content, ann = edited(content, **fields)
    image = next(i for i in content['images'] if i['id'] == ann['image_id'])
    with pytest.raises(ValueError) as err:
        build(root, metainfo, content, WITH_MASKS)
    message = str(err.value)
    assert f'edited.json: annotation id {ann["id"]} of image ' \
        f'{image["file_name"]!r}' in message
    assert what in message
    # Without masks in the pipeline mmdet never reads them: as stock.
    dataset, _ = build(root, metainfo, content, BOXES_ONLY)
    assert len(dataset) == 3


@pytest.mark.parametrize('fields,what', [
    (dict(bbox=None),
     'annotation id {id} of image {image!r} (id 0) has no "bbox"'),
    (dict(area=None),
     'annotation id {id} of image {image!r} (id 0) has no "area"'),
    (dict(category_id=None), 'annotations[0] (id {id}) has no "category_id"'),
    (dict(image_id=None), 'annotations[0] (id {id}) has no "image_id"'),
    (dict(bbox=[1, 2, 3]), 'has "bbox": [1, 2, 3]; expected [x, y, width'),
    (dict(area='big'), "has \"area\": 'big'; expected a number"),
])
def test_missing_or_malformed_fields_are_named(coco, fields, what):
    root, metainfo, content = coco
    image = next(i['file_name'] for i in content['images']
                 if i['id'] == content['annotations'][0]['image_id'])
    content, ann = edited(content, **fields)
    with pytest.raises(ValueError) as err:
        build(root, metainfo, content, BOXES_ONLY)
    assert 'edited.json: ' in str(err.value)
    assert what.format(id=ann['id'], image=image) in str(err.value)


def test_what_mmdet_skips_or_ignores_keeps_its_behaviour(coco):
    root, metainfo, content = coco
    # A zero-area annotation is skipped by mmdet: its mask is not needed.
    content, _ = edited(content, segmentation=[], area=0)
    dataset, _ = build(root, metainfo, content, WITH_MASKS)
    assert len(dataset) == 3
    # A polygon too short to draw: mmdet ignores the instance.
    content, ann = edited(content, segmentation=[[1, 2, 3, 4]], area=10)
    dataset, _ = build(root, metainfo, content, WITH_MASKS)
    index = next(i for i in range(len(dataset))
                 if dataset.get_data_info(i)['img_id'] == ann['image_id'])
    sample = dataset[index]['data_samples']
    assert sample.ignored_instances.masks.masks.shape[0] >= 1
