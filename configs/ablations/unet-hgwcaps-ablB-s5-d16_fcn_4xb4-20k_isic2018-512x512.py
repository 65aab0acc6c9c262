# HGWCaps UNet on ISIC-2018; ablation B (paper Sec. Q4): no regulariser E.
# Everything else as unet-hgwcaps-s5-d16_fcn_4xb4-20k_isic2018-512x512.py.
_base_ = ['../unet/unet-hgwcaps-s5-d16_fcn_4xb4-20k_isic2018-512x512.py']

model = dict(backbone=dict(hgw_cfg=dict(reg_weight=0.0)))
