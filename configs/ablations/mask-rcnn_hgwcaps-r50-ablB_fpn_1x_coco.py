# Mask R-CNN, HGWCaps-R50 backbone, FPN, COCO; ablation B (paper Sec. Q4): no
# regulariser E. Everything else as mask-rcnn_hgwcaps-r50_fpn_1x_coco.py.
_base_ = ['../mask_rcnn/mask-rcnn_hgwcaps-r50_fpn_1x_coco.py']

model = dict(backbone=dict(hgw_cfg=dict(reg_weight=0.0)))
