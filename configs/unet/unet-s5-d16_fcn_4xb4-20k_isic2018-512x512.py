# Stock UNet (s5-d16, FCN head) on ISIC-2018 Task 1: the baseline for the
# HGWCaps UNet. Schedule: mmseg's stock 20k.
_base_ = [
    'mmseg::_base_/models/fcn_unet_s5-d16.py',
    '../_base_/datasets/isic2018.py', 'mmseg::_base_/default_runtime.py',
    'mmseg::_base_/schedules/schedule_20k.py'
]
crop_size = (512, 512)
data_preprocessor = dict(size=crop_size)
model = dict(data_preprocessor=data_preprocessor,
             decode_head=dict(num_classes=2),
             auxiliary_head=dict(num_classes=2), test_cfg=dict(mode='whole'))
# The project's runtime additions: stop a diverged run before it writes a
# NaN checkpoint; random generator states in checkpoints (exact resume).
custom_hooks = [dict(type='NonFiniteGuardHook'), dict(type='RNGStateHook')]
