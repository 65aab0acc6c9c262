# ImageNet-1K pretraining of HGWCaps-ResNet-50 (paper Sec. Q2, Table
# "imagenet"): HGW capsules in the 3x3 convolution of every block of stages
# 3 and 4 (256 / 512 channels = 32 types of dimension 8 / 16), MMPretrain's
# stock ResNet-50 recipe otherwise (8 GPUs x 32 images, SGD, 100 epochs).
#
# The backbone is the class MMDetection's configs use, so the checkpoint
# loads into configs/mask_rcnn/*hgwcaps-r50* with
#   backbone=dict(init_cfg=dict(type='Pretrained', prefix='backbone.',
#                               checkpoint='<this run>/epoch_100.pth'))
_base_ = [
    'mmpretrain::resnet/resnet50_8xb32_in1k.py',  # the stock counterpart
    '../_base_/hgwcaps.py',
]

model = dict(backbone=dict(
    _delete_=True,
    type='HGWCapsResNet',
    depth=50,
    out_indices=(3, ),
    style='pytorch',
    # Trained from scratch: BN statistics are learned, nothing frozen
    # (MMDetection's ResNet defaults are for fine-tuning).
    norm_eval=False,
    frozen_stages=-1,
    hgw_cfg={{_base_.hgw_cfg}},
    stage_with_hgw=(False, False, True, True)))

# beta_u = u / U (paper, Algorithm 1) over the first epoch at 8 x 32.
custom_hooks = [
    dict(type='HGWBetaWarmupHook', warmup_iters=5000),
    dict(type='HGWLossScaleHook'),
    dict(type='NonFiniteGuardHook'),
    dict(type='RNGStateHook'),
]
