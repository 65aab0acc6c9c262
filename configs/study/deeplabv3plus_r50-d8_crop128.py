# Stock DeepLabV3+ R-50-D8 for data at native resolution: trained on random
# 128x128 crops, tested on whole images, as ./unet-s5-d16_fcn_crop128.py
# does for the UNet (the demo pipeline's resize of a whole image to 128x128
# would erase structures a few pixels wide). Point it at any
# ISIC-2018-layout root with
#   --cfg-options {train,val,test}_dataloader.dataset.data_root=ROOT
_base_ = ['../demo/deeplabv3plus_r50-d8_demo-isic.py']

crop_size = (128, 128)
max_iters = 400
train_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='LoadAnnotations'),
    dict(type='RandomCrop', crop_size=crop_size),
    dict(type='RandomFlip', prob=0.5, direction='horizontal'),
    dict(type='RandomFlip', prob=0.5, direction='vertical'),
    dict(type='PackSegInputs')
]
# Whole images at their own size: the dilated ResNet takes any size, and
# the data preprocessor pads to ``crop_size`` only in training.
test_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='LoadAnnotations'),
    dict(type='PackSegInputs')
]
train_dataloader = dict(dataset=dict(pipeline=train_pipeline))
val_dataloader = dict(dataset=dict(pipeline=test_pipeline))
test_dataloader = val_dataloader
train_cfg = dict(max_iters=max_iters, val_interval=max_iters)
param_scheduler = [
    dict(type='PolyLR', eta_min=1e-4, power=0.9, begin=0, end=max_iters,
         by_epoch=False)
]
default_hooks = dict(checkpoint=dict(interval=max_iters))
