# HGWCaps DeepLabV3+ R-50-D8 on the built-in lesion set. Inherits the stock
# demo config (data, image size, schedule) and changes the backbone exactly
# as ../deeplabv3plus/deeplabv3plus_hgwcaps-r50-d8_4xb4-20k_isic2018-512x512.py
# does; the beta warm-up is shortened to the schedule.
_base_ = ['./deeplabv3plus_r50-d8_demo-isic.py', '../_base_/hgw_layer.py']

model = dict(
    backbone=dict(type='HGWCapsResNetV1c', hgw_cfg={{_base_.hgw_cfg}}))
custom_hooks = [
    dict(type='HGWBetaWarmupHook', warmup_iters=30),
    dict(type='HGWLossScaleHook'),
    dict(type='NonFiniteGuardHook'),
    dict(type='RNGStateHook')
]
