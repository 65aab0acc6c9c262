# The paper's CIFAR setting (./hgwcaps-resnet110_cifar10.py: capsules of
# dimension 2 in the last stage, capsule pooling, class capsules) at depth
# 20 on the built-in shape classification set; data and schedule as the
# stock ./cifar-resnet20_demo-shapes.py (which imports the plugin).
_base_ = ['./cifar-resnet20_demo-shapes.py']

# The capsule layer's defaults are the shared settings of
# ../_base_/hgwcaps.py; 32 types give dimension 2 on 64 channels.
hgw_cfg = dict(type='HGWCaps', in_types=32, out_types=32)

model = dict(
    backbone=dict(type='HGWCapsCIFARResNet', hgw_cfg=hgw_cfg,
                  stage_with_hgw=(False, False, True)),
    neck=dict(_delete_=True, type='CapsulePoolNeck', num_types=32),
    head=dict(_delete_=True, type='ClassCapsuleHead', num_classes=4,
              in_channels=64, in_types=32, class_dim=16, routing_cfg=hgw_cfg))
custom_hooks = [
    dict(type='HGWBetaWarmupHook', warmup_iters=20),
    dict(type='HGWLossScaleHook'),
    dict(type='NonFiniteGuardHook'),
    dict(type='RNGStateHook'),
]
