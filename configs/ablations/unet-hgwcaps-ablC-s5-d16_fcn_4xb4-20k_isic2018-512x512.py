# HGWCaps UNet on ISIC-2018; ablation C (paper Sec. Q4): no observed structure;
# the structures are K(X, X) alone and E aims at the structure with nothing
# observed, at the same Wasserstein weight. Everything else as
# unet-hgwcaps-s5-d16_fcn_4xb4-20k_isic2018-512x512.py.
_base_ = ['../unet/unet-hgwcaps-s5-d16_fcn_4xb4-20k_isic2018-512x512.py']

model = dict(backbone=dict(hgw_cfg=dict(use_observed=False)))
