# Stock UNet narrowed to the HGWCaps UNet's parameter count (base 34
# channels, heads alike), for data at native resolution: the
# parameter-matched control of unet-hgwcaps-s5-d16_fcn_crop128.py.
_base_ = ['./unet-s5-d16_fcn_crop128.py']

model = dict(backbone=dict(base_channels=34),
             decode_head=dict(in_channels=34, channels=34),
             auxiliary_head=dict(in_channels=68, channels=34))
