# HGWCaps UNet on ISIC-2018; the observed structure of Eq. 18 counted in the
# input (capsule types present together over the k x k patch) instead of the
# co-activation of the components. Everything else as
# unet-hgwcaps-s5-d16_fcn_4xb4-20k_isic2018-512x512.py.
_base_ = ['../unet/unet-hgwcaps-s5-d16_fcn_4xb4-20k_isic2018-512x512.py']

model = dict(backbone=dict(hgw_cfg=dict(observed='counts')))
