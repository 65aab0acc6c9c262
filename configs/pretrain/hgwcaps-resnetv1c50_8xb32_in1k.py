# ImageNet-1K pretraining of HGWCaps-ResNetV1c-50 (deep stem), the backbone
# of the DeepLabV3+ configs: capsules in stages 3 and 4 as in
# ./hgwcaps-resnet50_8xb32_in1k.py, MMPretrain's ResNetV1c-50 recipe
# otherwise. The backbone is MMSegmentation's class,
# so the checkpoint loads into configs/deeplabv3plus/*hgwcaps-r50* with
#   backbone=dict(init_cfg=dict(type='Pretrained', prefix='backbone.',
#                               checkpoint='<this run>/epoch_100.pth'))
# (the dilations those configs set do not change any weight's shape).
_base_ = [
    'mmpretrain::resnet/resnetv1c50_8xb32_in1k.py',  # the stock counterpart
    '../_base_/hgwcaps.py',
]

model = dict(backbone=dict(_delete_=True, type='HGWCapsResNetV1c', depth=50,
                           out_indices=(3, ), style='pytorch', norm_eval=False,
                           hgw_cfg={{_base_.hgw_cfg}}, stage_with_hgw=(False,
                                                                       False,
                                                                       True,
                                                                       True)))

custom_hooks = [
    dict(type='HGWBetaWarmupHook', warmup_iters=5000),
    dict(type='HGWLossScaleHook'),
    dict(type='NonFiniteGuardHook'),
    dict(type='RNGStateHook'),
]
