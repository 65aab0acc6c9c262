# HGWCaps Mask R-CNN R-50 FPN on the built-in shapes set; ablation C (paper
# Sec. Q4): no observed structure; the structures are K(X, X) alone and E aims
# at the structure with nothing observed, at the same Wasserstein weight.
# Everything else as mask-rcnn_hgwcaps-r50_fpn_demo-shapes.py.
_base_ = ['../demo/mask-rcnn_hgwcaps-r50_fpn_demo-shapes.py']

model = dict(backbone=dict(hgw_cfg=dict(use_observed=False)))
