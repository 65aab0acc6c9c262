# HGWCaps UNet on the built-in lesion set; ablation A (paper Sec. Q4): the
# solver's proximal KL term replaced by the entropic regulariser H(T).
# Everything else as unet-hgwcaps-s5-d16_fcn_demo-isic.py.
_base_ = ['../demo/unet-hgwcaps-s5-d16_fcn_demo-isic.py']

model = dict(backbone=dict(hgw_cfg=dict(solver_cfg=dict(
    regularizer='entropic'))))
