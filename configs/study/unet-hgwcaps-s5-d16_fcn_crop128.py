# HGWCaps UNet for data at native resolution (see unet-s5-d16_fcn_crop128.py):
# the backbone as in ../demo/unet-hgwcaps-s5-d16_fcn_demo-isic.py, beta
# warm-up over the first quarter of the schedule.
_base_ = ['./unet-s5-d16_fcn_crop128.py', '../_base_/hgw_layer.py']

model = dict(backbone=dict(type='HGWCapsUNet', hgw_cfg={{_base_.hgw_cfg}}))
custom_hooks = [
    dict(type='HGWBetaWarmupHook', warmup_iters=100),
    dict(type='HGWLossScaleHook'),
    dict(type='NonFiniteGuardHook'),
    dict(type='RNGStateHook')
]
