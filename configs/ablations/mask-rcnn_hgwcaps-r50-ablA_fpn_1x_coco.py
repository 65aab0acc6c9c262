# Mask R-CNN, HGWCaps-R50 backbone, FPN, COCO; ablation A (paper Sec. Q4): the
# solver's proximal KL term replaced by the entropic regulariser H(T).
# Everything else as mask-rcnn_hgwcaps-r50_fpn_1x_coco.py.
_base_ = ['../mask_rcnn/mask-rcnn_hgwcaps-r50_fpn_1x_coco.py']

model = dict(backbone=dict(hgw_cfg=dict(solver_cfg=dict(
    regularizer='entropic'))))
