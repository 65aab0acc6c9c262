# Stock UNet narrowed to the HGWCaps UNet's parameter count (base 34
# channels instead of 64, heads narrowed alike): the parameter-matched
# control of unet-hgwcaps-s5-d16_fcn_demo-isic.py.
_base_ = ['./unet-s5-d16_fcn_demo-isic.py']

model = dict(backbone=dict(base_channels=34),
             decode_head=dict(in_channels=34, channels=34),
             auxiliary_head=dict(in_channels=68, channels=34))
