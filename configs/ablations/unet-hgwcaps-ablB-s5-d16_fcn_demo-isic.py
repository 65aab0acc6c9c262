# HGWCaps UNet on the built-in lesion set; ablation B (paper Sec. Q4): no
# regulariser E. Everything else as unet-hgwcaps-s5-d16_fcn_demo-isic.py.
_base_ = ['../demo/unet-hgwcaps-s5-d16_fcn_demo-isic.py']

model = dict(backbone=dict(hgw_cfg=dict(reg_weight=0.0)))
