# HGWCaps UNet on the built-in lesion set; ablation C (paper Sec. Q4): no
# observed structure; the structures are K(X, X) alone and E aims at the
# structure with nothing observed, at the same Wasserstein weight. Everything
# else as unet-hgwcaps-s5-d16_fcn_demo-isic.py.
_base_ = ['../demo/unet-hgwcaps-s5-d16_fcn_demo-isic.py']

model = dict(backbone=dict(hgw_cfg=dict(use_observed=False)))
