# HGWCaps UNet on ISIC-2018; ablation A (paper Sec. Q4): the solver's proximal
# KL term replaced by the entropic regulariser H(T). Everything else as
# unet-hgwcaps-s5-d16_fcn_4xb4-20k_isic2018-512x512.py.
_base_ = ['../unet/unet-hgwcaps-s5-d16_fcn_4xb4-20k_isic2018-512x512.py']

model = dict(backbone=dict(hgw_cfg=dict(solver_cfg=dict(
    regularizer='entropic'))))
