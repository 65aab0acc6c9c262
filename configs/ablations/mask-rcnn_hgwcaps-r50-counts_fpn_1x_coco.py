# Mask R-CNN, HGWCaps-R50 backbone, FPN, COCO; the observed structure of Eq. 18
# counted in the input (capsule types present together over the k x k patch)
# instead of the co-activation of the components. Everything else as
# mask-rcnn_hgwcaps-r50_fpn_1x_coco.py.
_base_ = ['../mask_rcnn/mask-rcnn_hgwcaps-r50_fpn_1x_coco.py']

model = dict(backbone=dict(hgw_cfg=dict(observed='counts')))
