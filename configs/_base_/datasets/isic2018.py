# ISIC-2018 Task 1 lesion segmentation, laid out by
# tools/dataset_converters/isic2018.py. Official split: 2594 training, 100
# validation and 1000 test images of varying size, resized here to 512x512.
# ISIC2018Dataset is mmhgw's.
custom_imports = dict(imports=['mmhgw'], allow_failed_imports=False)
dataset_type = 'ISIC2018Dataset'
data_root = 'data/ISIC2018'
crop_size = (512, 512)
train_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='LoadAnnotations'),
    dict(type='RandomResize', scale=(640, 512), ratio_range=(0.75, 1.5),
         keep_ratio=True),
    dict(type='RandomCrop', crop_size=crop_size, cat_max_ratio=0.9),
    dict(type='RandomFlip', prob=0.5, direction='horizontal'),
    dict(type='RandomFlip', prob=0.5, direction='vertical'),
    dict(type='PhotoMetricDistortion'),
    dict(type='PackSegInputs')
]
test_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='Resize', scale=crop_size, keep_ratio=False),
    dict(type='LoadAnnotations'),
    dict(type='PackSegInputs')
]
train_dataloader = dict(
    batch_size=4, num_workers=4, persistent_workers=True,
    sampler=dict(type='InfiniteSampler', shuffle=True), dataset=dict(
        type=dataset_type, data_root=data_root,
        data_prefix=dict(img_path='images/train',
                         seg_map_path='annotations/train'),
        pipeline=train_pipeline))
val_dataloader = dict(
    batch_size=1, num_workers=4, persistent_workers=True,
    sampler=dict(type='DefaultSampler', shuffle=False), dataset=dict(
        type=dataset_type, data_root=data_root,
        data_prefix=dict(img_path='images/val',
                         seg_map_path='annotations/val'),
        pipeline=test_pipeline))
test_dataloader = val_dataloader
val_evaluator = dict(type='IoUMetric', iou_metrics=['mIoU', 'mDice'])
test_evaluator = val_evaluator
