# HGWCaps DeepLabV3+ R-50-D8 for data at native resolution (see
# deeplabv3plus_r50-d8_crop128.py): the backbone as in
# ../demo/deeplabv3plus_hgwcaps-r50-d8_demo-isic.py, beta warm-up over the
# first quarter of the schedule.
_base_ = ['./deeplabv3plus_r50-d8_crop128.py', '../_base_/hgw_layer.py']

model = dict(
    backbone=dict(type='HGWCapsResNetV1c', hgw_cfg={{_base_.hgw_cfg}}))
custom_hooks = [
    dict(type='HGWBetaWarmupHook', warmup_iters=100),
    dict(type='HGWLossScaleHook'),
    dict(type='NonFiniteGuardHook'),
    dict(type='RNGStateHook')
]
