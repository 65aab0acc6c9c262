# HGWCaps Mask R-CNN R-50 FPN on the built-in shapes set; uniform routing: the
# transport plan fixed to p q^T, no optimal transport; the baseline the HGW
# routing must beat. Everything else as mask-rcnn_hgwcaps-r50_fpn_demo-
# shapes.py.
_base_ = ['../demo/mask-rcnn_hgwcaps-r50_fpn_demo-shapes.py']

model = dict(backbone=dict(hgw_cfg=dict(routing='uniform')))
