# What every HGWCaps config on top of a stock mmdet / mmseg config shares:
# the plugin import, the capsule layer's settings (hgw_layer.py) and the
# hooks: beta warm-up, divergence guard, random states in checkpoints.
_base_ = ['./hgw_layer.py']

custom_imports = dict(imports=['mmhgw'], allow_failed_imports=False)
custom_hooks = {{_base_.hgw_hooks}}
