# Stock DeepLabV3+ R-50-D8 for data at native resolution: trained on random
# 128x128 crops, tested on whole images
# (../_base_/datasets/native_crop128.py), as ./unet-s5-d16_fcn_crop128.py
# for the UNet. Point it at any ISIC-2018-layout root with
#   --cfg-options {train,val,test}_dataloader.dataset.data_root=ROOT
_base_ = [
    '../demo/deeplabv3plus_r50-d8_demo-isic.py',
    '../_base_/datasets/native_crop128.py'
]

max_iters = 400
# The dilated ResNet takes whole images at any size; the data preprocessor
# pads to the crop size in training only (the crops' own size, so that the
# two cannot part).
model = dict(data_preprocessor=dict(size={{_base_.native_crop_size}}))
train_dataloader = dict(dataset=dict(
    pipeline={{_base_.native_crop_train_pipeline}}))
val_dataloader = dict(dataset=dict(
    pipeline={{_base_.whole_image_test_pipeline}}))
test_dataloader = val_dataloader
train_cfg = dict(max_iters=max_iters, val_interval=max_iters)
param_scheduler = [
    dict(type='PolyLR', eta_min=1e-4, power=0.9, begin=0, end=max_iters,
         by_epoch=False)
]
default_hooks = dict(checkpoint=dict(interval=max_iters))
