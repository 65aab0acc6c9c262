# Mask R-CNN, HGWCaps-R50 backbone, FPN, COCO; uniform routing: the transport
# plan fixed to p q^T, no optimal transport; the baseline the HGW routing must
# beat. Everything else as mask-rcnn_hgwcaps-r50_fpn_1x_coco.py.
_base_ = ['../mask_rcnn/mask-rcnn_hgwcaps-r50_fpn_1x_coco.py']

model = dict(backbone=dict(hgw_cfg=dict(routing='uniform')))
