# Stock UNet (s5-d16, FCN head) on Pascal VOC 2012 + SBD aug: the baseline
# for the HGWCaps UNet (mmseg ships no UNet config for VOC). Model: mmseg's
# fcn_unet_s5-d16; data and 20k schedule: mmseg's stock VOC settings.
_base_ = [
    'mmseg::_base_/models/fcn_unet_s5-d16.py',
    'mmseg::_base_/datasets/pascal_voc12_aug.py',
    'mmseg::_base_/default_runtime.py',
    'mmseg::_base_/schedules/schedule_20k.py'
]
crop_size = (512, 512)
data_preprocessor = dict(size=crop_size)
model = dict(data_preprocessor=data_preprocessor,
             decode_head=dict(num_classes=21),
             auxiliary_head=dict(num_classes=21), test_cfg=dict(mode='whole'))
# mmhgw provides the hooks below, and lets mmengine load this config's
# checkpoints under torch's weights_only loading.
custom_imports = dict(imports=['mmhgw'], allow_failed_imports=False)
# The project's runtime additions: stop a diverged run before it writes a
# NaN checkpoint; random generator states in checkpoints (exact resume).
custom_hooks = [dict(type='NonFiniteGuardHook'), dict(type='RNGStateHook')]
