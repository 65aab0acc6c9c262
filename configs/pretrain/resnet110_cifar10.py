# Stock CIFAR ResNet-110 (three stages of 16 / 32 / 64 channels) on CIFAR-10
# with the paper's CIFAR schedule: SGD, momentum 0.9, lr 0.1, divided by 10
# every 30 epochs, 100 epochs, 128 images per step. The baseline of
# ./hgwcaps-resnet110_cifar10.py.
_base_ = [
    'mmpretrain::_base_/datasets/cifar10_bs16.py',
    'mmpretrain::_base_/schedules/cifar10_bs128.py',
    'mmpretrain::_base_/default_runtime.py',
]
custom_imports = dict(imports=['mmhgw'], allow_failed_imports=False)

model = dict(
    type='ImageClassifier', backbone=dict(type='CIFARResNet', depth=110),
    neck=dict(type='GlobalAveragePooling'),
    head=dict(type='LinearClsHead', num_classes=10, in_channels=64,
              loss=dict(type='CrossEntropyLoss', loss_weight=1.0)))

param_scheduler = dict(type='MultiStepLR', by_epoch=True,
                       milestones=[30, 60, 90], gamma=0.1)
train_cfg = dict(by_epoch=True, max_epochs=100, val_interval=1)
