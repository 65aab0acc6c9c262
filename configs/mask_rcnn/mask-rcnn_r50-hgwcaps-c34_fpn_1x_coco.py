# Mask R-CNN R-50 FPN on COCO with HGW capsules in the 3x3 convolutions of
# every bottleneck of stages 3 and 4 (the paper's placement), through the
# stock ResNet's `dcn` slot. Everything else, the 1x schedule included, is
# the stock mmdet config.
_base_ = ['mmdet::mask_rcnn/mask-rcnn_r50_fpn_1x_coco.py']

custom_imports = dict(imports=['mmhgw'], allow_failed_imports=False)

model = dict(
    backbone=dict(
        dcn=dict(
            type='HGWCaps',
            in_types=32,  # 256 / 512 channels -> capsules of dim 8 / 16
            out_types=32,
            num_parts=8,
            part_dim=8,
            eps=1e-3,  # paper
            outer_iters=2,
            inner_iters=3,
            beta=0.5,
            reg_weight=10.0),  # paper's lambda
        stage_with_dcn=(False, False, True, True)))

# beta ramps from 0 over the first 1000 iterations (paper: beta_u = u / U).
custom_hooks = [dict(type='HGWBetaWarmupHook', warmup_iters=1000)]
