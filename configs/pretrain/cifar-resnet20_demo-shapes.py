# Stock CIFAR ResNet-20 on the built-in shape classification set (32x32,
# 4 classes, made by tools/make_demo_data.py --only cls), read by
# MMPretrain's CustomDataset: the baseline of
# ./hgwcaps-cifar-resnet20_demo-shapes.py, a CPU-sized run of the
# pretraining path.
_base_ = ['./resnet110_cifar10.py']

data_root = 'data/demo/shapes_cls'
classes = ('circle', 'square', 'triangle', 'star')
max_iters = 60

model = dict(backbone=dict(depth=20), head=dict(num_classes=len(classes)))
data_preprocessor = dict(num_classes=len(classes), mean=[127.5, 127.5, 127.5],
                         std=[64.0, 64.0, 64.0], to_rgb=True)

train_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='RandomFlip', prob=0.5, direction='horizontal'),
    dict(type='PackInputs'),
]
test_pipeline = [dict(type='LoadImageFromFile'), dict(type='PackInputs')]
train_dataloader = dict(
    batch_size=16, num_workers=0, persistent_workers=False,
    dataset=dict(_delete_=True, type='CustomDataset', data_root=data_root,
                 ann_file='meta/train.txt', data_prefix='train',
                 metainfo=dict(classes=classes), pipeline=train_pipeline),
    sampler=dict(type='DefaultSampler', shuffle=True))
val_dataloader = dict(
    batch_size=16, num_workers=0, persistent_workers=False,
    dataset=dict(_delete_=True, type='CustomDataset', data_root=data_root,
                 ann_file='meta/val.txt', data_prefix='val',
                 metainfo=dict(classes=classes), pipeline=test_pipeline),
    sampler=dict(type='DefaultSampler', shuffle=False))
test_dataloader = val_dataloader

optim_wrapper = dict(optimizer=dict(lr=0.05))
param_scheduler = dict(_delete_=True, type='CosineAnnealingLR', by_epoch=False,
                       T_max=max_iters)
train_cfg = dict(_delete_=True, by_epoch=False, max_iters=max_iters,
                 val_interval=max_iters)
default_hooks = dict(logger=dict(interval=10),
                     checkpoint=dict(by_epoch=False, interval=max_iters))
