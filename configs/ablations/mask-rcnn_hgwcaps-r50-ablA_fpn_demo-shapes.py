# HGWCaps Mask R-CNN R-50 FPN on the built-in shapes set; ablation A (paper
# Sec. Q4): the solver's proximal KL term replaced by the entropic regulariser
# H(T). Everything else as mask-rcnn_hgwcaps-r50_fpn_demo-shapes.py.
_base_ = ['../demo/mask-rcnn_hgwcaps-r50_fpn_demo-shapes.py']

model = dict(backbone=dict(hgw_cfg=dict(solver_cfg=dict(
    regularizer='entropic'))))
