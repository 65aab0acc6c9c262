# HGWCaps Mask R-CNN R-50 FPN on the built-in shapes set; ablation B (paper
# Sec. Q4): no regulariser E. Everything else as
# mask-rcnn_hgwcaps-r50_fpn_demo-shapes.py.
_base_ = ['../demo/mask-rcnn_hgwcaps-r50_fpn_demo-shapes.py']

model = dict(backbone=dict(hgw_cfg=dict(reg_weight=0.0)))
