# Mask R-CNN, HGWCaps-R50 backbone, FPN, COCO; ablation C (paper Sec. Q4): no
# observed structure; the structures are K(X, X) alone and E aims at the
# structure with nothing observed, at the same Wasserstein weight. Everything
# else as mask-rcnn_hgwcaps-r50_fpn_1x_coco.py.
_base_ = ['../mask_rcnn/mask-rcnn_hgwcaps-r50_fpn_1x_coco.py']

model = dict(backbone=dict(hgw_cfg=dict(use_observed=False)))
