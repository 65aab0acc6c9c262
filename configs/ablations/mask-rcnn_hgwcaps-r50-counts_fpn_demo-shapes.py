# HGWCaps Mask R-CNN R-50 FPN on the built-in shapes set; the observed
# structure of Eq. 18 counted in the input (capsule types present together over
# the k x k patch) instead of the co-activation of the components. Everything
# else as mask-rcnn_hgwcaps-r50_fpn_demo-shapes.py.
_base_ = ['../demo/mask-rcnn_hgwcaps-r50_fpn_demo-shapes.py']

model = dict(backbone=dict(hgw_cfg=dict(observed='counts')))
