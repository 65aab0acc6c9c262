# Mask R-CNN, HGWCaps-R101 backbone, FPN, COCO: the paper's Table "obj"
# setting. Schedule: mmdet's stock 1x (see the R-50 config).
_base_ = [
    'mmdet::mask_rcnn/mask-rcnn_r101_fpn_1x_coco.py', '../_base_/hgwcaps.py'
]

model = dict(backbone=dict(type='HGWCapsResNet', hgw_cfg={{_base_.hgw_cfg}},
                           stage_with_hgw=(False, False, True, True)))
