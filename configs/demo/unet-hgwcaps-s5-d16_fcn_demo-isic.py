# HGWCaps UNet on the built-in lesion set. Inherits the stock demo config
# (data, image size, schedule) and changes the backbone exactly as
# ../unet/unet-hgwcaps-s5-d16_fcn_4xb4-20k_isic2018-512x512.py does; the
# beta warm-up is shortened to the schedule.
_base_ = ['./unet-s5-d16_fcn_demo-isic.py', '../_base_/hgw_layer.py']

model = dict(backbone=dict(type='HGWCapsUNet', hgw_cfg={{_base_.hgw_cfg}}))
custom_hooks = [
    dict(type='HGWBetaWarmupHook', warmup_iters=30),
    dict(type='HGWLossScaleHook'),
    dict(type='NonFiniteGuardHook'),
    dict(type='RNGStateHook')
]
