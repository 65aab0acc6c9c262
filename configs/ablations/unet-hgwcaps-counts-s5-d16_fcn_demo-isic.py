# HGWCaps UNet on the built-in lesion set; the observed structure of Eq. 18
# counted in the input (capsule types present together over the k x k patch)
# instead of the co-activation of the components. Everything else as
# unet-hgwcaps-s5-d16_fcn_demo-isic.py.
_base_ = ['../demo/unet-hgwcaps-s5-d16_fcn_demo-isic.py']

model = dict(backbone=dict(hgw_cfg=dict(observed='counts')))
