# DeepLabV3+ with the dilated HGWCaps-ResNet-50-V1c backbone (capsules in
# stages 3 and 4) on Pascal VOC 2012 aug (paper Table c3). Everything else,
# the 20k schedule included, is mmseg's stock config.
_base_ = [
    'mmseg::deeplabv3plus/deeplabv3plus_r50-d8_4xb4-20k_voc12aug-512x512.py',
    '../_base_/hgwcaps.py'
]
model = dict(
    backbone=dict(type='HGWCapsResNetV1c', hgw_cfg={{_base_.hgw_cfg}}))
