# HGWCaps CIFAR ResNet-110 in the paper's CIFAR setting (Sec. Q2): HGW
# capsules in the 3x3 convolution of every block of the last stage, 32
# capsule types of dimension 2 (its 64 channels); capsule pooling instead
# of mean pooling; class capsules whose lengths are the class scores
# (margin loss). Schedule and data as the stock counterpart.
_base_ = ['./resnet110_cifar10.py']  # imports the plugin already

# The capsule settings of ../_base_/hgwcaps.py (which cannot be a second
# base here: both would set custom_imports).
hgw_cfg = dict(
    type='HGWCaps',
    in_types=32,  # paper: 32 capsule types of dimension 2 on 64 channels
    out_types=32,
    num_parts=8,
    part_dim=8,
    eps=1e-3,  # paper
    outer_iters=2,
    inner_iters=3,
    grad='envelope',
    beta=0.5,
    reg_weight=10.0,  # paper's lambda
    routing='hgw',
    recompute='value')

model = dict(
    backbone=dict(
        type='HGWCapsCIFARResNet',
        depth=110,
        hgw_cfg=hgw_cfg,
        stage_with_hgw=(False, False, True)),
    neck=dict(_delete_=True, type='CapsulePoolNeck', num_types=32),
    head=dict(
        _delete_=True,
        type='ClassCapsuleHead',
        num_classes=10,
        in_channels=64,
        in_types=32,
        class_dim=16,
        routing_cfg=hgw_cfg))

# beta_u = u / U (paper, Algorithm 1) over the first 2 epochs (391 steps
# each).
custom_hooks = [dict(type='HGWBetaWarmupHook', warmup_iters=800)]
