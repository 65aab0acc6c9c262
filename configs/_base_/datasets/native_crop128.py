# Pipelines for data at native resolution, shared by the configs in
# ../../study/: training on random 128x128 crops (no resize: structures a
# few pixels wide, such as electron-microscopy membranes, would be erased
# by the demo pipeline's resize of a whole image to 128x128), testing on
# whole images at their own size. Named apart from ``train_pipeline`` /
# ``test_pipeline`` so that a config can inherit them beside a model's base
# that defines those.
native_crop_size = (128, 128)
native_crop_train_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='LoadAnnotations'),
    dict(type='RandomCrop', crop_size=native_crop_size),
    dict(type='RandomFlip', prob=0.5, direction='horizontal'),
    dict(type='RandomFlip', prob=0.5, direction='vertical'),
    dict(type='PackSegInputs')
]
whole_image_test_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='LoadAnnotations'),
    dict(type='PackSegInputs')
]
