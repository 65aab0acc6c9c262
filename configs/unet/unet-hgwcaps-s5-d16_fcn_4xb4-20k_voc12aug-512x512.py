# HGWCaps UNet on Pascal VOC 2012 aug: capsules in the 3x3 convolutions of
# the deepest encoder and decoder stages (paper Table c3). Everything else,
# the 20k schedule included, as the stock baseline config.
# The stock baseline brings the plugin import.
_base_ = [
    './unet-s5-d16_fcn_4xb4-20k_voc12aug-512x512.py', '../_base_/hgw_layer.py'
]
model = dict(backbone=dict(type='HGWCapsUNet', hgw_cfg={{_base_.hgw_cfg}}))
custom_hooks = {{_base_.hgw_hooks}}
