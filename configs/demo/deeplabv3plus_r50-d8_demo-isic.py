# Stock DeepLabV3+ R-50-D8 on the built-in lesion set (ISIC-2018 layout,
# made by tools/make_demo_data.py): the baseline of the HGWCaps demo config.
# Changes to
# ../deeplabv3plus/deeplabv3plus_r50-d8_4xb4-20k_isic2018-512x512.py:
# data path, image size, a short schedule, and no ImageNet weights (they
# cannot be fetched offline; the backbone trains from scratch).
_base_ = ['../deeplabv3plus/deeplabv3plus_r50-d8_4xb4-20k_isic2018-512x512.py']

data_root = 'data/demo/ISIC2018'
crop_size = (128, 128)
max_iters = 60

model = dict(pretrained=None, data_preprocessor=dict(size=crop_size))
train_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='LoadAnnotations'),
    dict(type='RandomResize', scale=crop_size, ratio_range=(0.8, 1.25),
         keep_ratio=True),
    dict(type='RandomCrop', crop_size=crop_size),
    dict(type='RandomFlip', prob=0.5),
    dict(type='PackSegInputs')
]
test_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='Resize', scale=crop_size, keep_ratio=False),
    dict(type='LoadAnnotations'),
    dict(type='PackSegInputs')
]
train_dataloader = dict(
    batch_size=4, num_workers=0, persistent_workers=False,
    dataset=dict(data_root=data_root, pipeline=train_pipeline))
val_dataloader = dict(
    batch_size=1, num_workers=0, persistent_workers=False,
    dataset=dict(data_root=data_root, pipeline=test_pipeline))
test_dataloader = val_dataloader

train_cfg = dict(max_iters=max_iters, val_interval=max_iters)
param_scheduler = [
    dict(type='PolyLR', eta_min=1e-4, power=0.9, begin=0, end=max_iters,
         by_epoch=False)
]
default_hooks = dict(logger=dict(interval=10),
                     checkpoint=dict(by_epoch=False, interval=max_iters // 3))
