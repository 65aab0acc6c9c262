# HGWCaps UNet on ISIC-2018; uniform routing: the transport plan fixed to p
# q^T, no optimal transport; the baseline the HGW routing must beat. Everything
# else as unet-hgwcaps-s5-d16_fcn_4xb4-20k_isic2018-512x512.py.
_base_ = ['../unet/unet-hgwcaps-s5-d16_fcn_4xb4-20k_isic2018-512x512.py']

model = dict(backbone=dict(hgw_cfg=dict(routing='uniform')))
