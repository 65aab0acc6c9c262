# HGWCaps UNet on the built-in lesion set; uniform routing: the transport plan
# fixed to p q^T, no optimal transport; the baseline the HGW routing must beat.
# Everything else as unet-hgwcaps-s5-d16_fcn_demo-isic.py.
_base_ = ['../demo/unet-hgwcaps-s5-d16_fcn_demo-isic.py']

model = dict(backbone=dict(hgw_cfg=dict(routing='uniform')))
