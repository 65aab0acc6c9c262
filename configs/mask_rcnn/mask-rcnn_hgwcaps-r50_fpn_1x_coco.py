# Mask R-CNN, HGWCaps-R50 backbone (capsules in the 3x3 convolutions of
# stages 3 and 4, as the paper), FPN, COCO. Schedule: mmdet's stock 1x
# (SGD, 12 epochs). The paper trained with AdamW 5e-4 for 40 epochs on
# 512x512 crops; the stock schedule keeps the comparison with the stock
# config one-to-one.
_base_ = [
    'mmdet::mask_rcnn/mask-rcnn_r50_fpn_1x_coco.py', '../_base_/hgwcaps.py'
]

model = dict(backbone=dict(type='HGWCapsResNet', hgw_cfg={{_base_.hgw_cfg}},
                           stage_with_hgw=(False, False, True, True)))
