# Mask R-CNN, HGWCaps-R50 backbone and the capsule neck (FPN whose 3x3
# output convolutions are HGW capsules), COCO. Schedule: mmdet's stock 1x.
_base_ = ['./mask-rcnn_hgwcaps-r50_fpn_1x_coco.py']

model = dict(neck=dict(type='HGWCapsFPN', hgw_cfg={{_base_.hgw_cfg}}))
