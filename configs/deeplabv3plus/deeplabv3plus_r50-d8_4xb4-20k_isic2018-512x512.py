# Stock DeepLabV3+ R-50-D8 on ISIC-2018 Task 1: the baseline for the
# HGWCaps variant. Model from mmseg's stock base; schedule: stock 20k.
_base_ = [
    'mmseg::_base_/models/deeplabv3plus_r50-d8.py',
    '../_base_/datasets/isic2018.py', 'mmseg::_base_/default_runtime.py',
    'mmseg::_base_/schedules/schedule_20k.py'
]
crop_size = (512, 512)
data_preprocessor = dict(size=crop_size)
model = dict(data_preprocessor=data_preprocessor,
             decode_head=dict(num_classes=2),
             auxiliary_head=dict(num_classes=2))
# The project's runtime additions: stop a diverged run before it writes a
# NaN checkpoint; random generator states in checkpoints (exact resume).
custom_hooks = [dict(type='NonFiniteGuardHook'), dict(type='RNGStateHook')]
