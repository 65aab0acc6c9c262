# HGWCaps Mask R-CNN R-50 FPN on the built-in shapes set. Inherits the stock
# demo config (data, image size, schedule) and changes the backbone exactly
# as configs/mask_rcnn/mask-rcnn_hgwcaps-r50_fpn_1x_coco.py changes the stock
# COCO config; the beta warm-up is shortened to the schedule.
_base_ = ['./mask-rcnn_r50_fpn_demo-shapes.py', '../_base_/hgw_layer.py']

model = dict(backbone=dict(type='HGWCapsResNet', hgw_cfg={{_base_.hgw_cfg}},
                           stage_with_hgw=(False, False, True, True)))
custom_hooks = [
    dict(type='HGWBetaWarmupHook', warmup_iters=50),
    dict(type='HGWLossScaleHook'),
    dict(type='NonFiniteGuardHook'),
    dict(type='RNGStateHook')
]
