# HGWCaps UNet on ISIC-2018 Task 1 (paper Table c3). Schedule: stock 20k.
# The stock baseline brings the plugin import.
_base_ = [
    './unet-s5-d16_fcn_4xb4-20k_isic2018-512x512.py', '../_base_/hgw_layer.py'
]
model = dict(backbone=dict(type='HGWCapsUNet', hgw_cfg={{_base_.hgw_cfg}}))
custom_hooks = {{_base_.hgw_hooks}}
