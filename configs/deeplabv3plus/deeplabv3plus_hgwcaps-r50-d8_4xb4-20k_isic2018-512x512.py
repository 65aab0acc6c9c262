# DeepLabV3+ with the HGWCaps-ResNet-50-V1c backbone on ISIC-2018 Task 1
# (paper Table c3). Schedule: stock 20k. The stock baseline brings the
# plugin import.
_base_ = [
    './deeplabv3plus_r50-d8_4xb4-20k_isic2018-512x512.py',
    '../_base_/hgw_layer.py'
]
model = dict(
    backbone=dict(type='HGWCapsResNetV1c', hgw_cfg={{_base_.hgw_cfg}}))
custom_hooks = {{_base_.hgw_hooks}}
