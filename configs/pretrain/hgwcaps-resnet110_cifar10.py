# HGWCaps CIFAR ResNet-110 in the paper's CIFAR setting (Sec. Q2): HGW
# capsules in the 3x3 convolution of every block of the last stage, 32
# capsule types of dimension 2 (its 64 channels); capsule pooling instead
# of mean pooling; class capsules whose lengths are the class scores
# (margin loss). Schedule and data as the stock counterpart.
# The stock counterpart imports the plugin already; hgw_layer.py holds the
# shared capsule settings without the runtime keys.
_base_ = ['./resnet110_cifar10.py', '../_base_/hgw_layer.py']
# Its 32 capsule types give the paper's dimension 2 on 64 channels.

model = dict(
    backbone=dict(type='HGWCapsCIFARResNet', depth=110,
                  hgw_cfg={{_base_.hgw_cfg}},
                  stage_with_hgw=(False, False, True)),
    neck=dict(_delete_=True, type='CapsulePoolNeck', num_types=32),
    head=dict(_delete_=True, type='ClassCapsuleHead', num_classes=10,
              in_channels=64, in_types=32, class_dim=16,
              routing_cfg={{_base_.hgw_cfg}}))

# beta_u = u / U (paper, Algorithm 1) over the first 2 epochs (391 steps
# each); the other hooks of an HGWCaps run as in hgw_layer.py.
custom_hooks = [
    dict(type='HGWBetaWarmupHook', warmup_iters=800),
    dict(type='HGWLossScaleHook'),
    dict(type='NonFiniteGuardHook'),
    dict(type='RNGStateHook'),
]
