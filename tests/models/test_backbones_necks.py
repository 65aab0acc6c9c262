"""HGWCaps backbones and neck behave as their stock counterparts."""

import pytest
import torch
from mmengine.registry import init_default_scope

import mmhgw  # noqa: F401
from mmhgw.models import HGWCaps
from mmhgw.models.backbones import HGWCapsResNet, HGWCapsResNetV1c, HGWCapsUNet
from mmhgw.models.necks import HGWCapsFPN
from mmhgw.testing import logged

HGW = dict(type='HGWCaps', in_types=4, out_types=4, num_parts=3, part_dim=4)


def evaluated(module):
    module.eval()  # the stock ResNet's train() returns None
    return module


def count_caps(module):
    return sum(isinstance(m, HGWCaps) for m in module.modules())


@pytest.mark.parametrize('depth', [18, 34, 50, 101, 152])
def test_resnet_depths_build_with_capsules_in_last_two_stages(depth):
    from mmdet.models.backbones import ResNet
    kw = dict(depth=depth, base_channels=8, out_indices=(0, 1, 2, 3),
              init_cfg=None)
    stock, caps = ResNet(**kw), HGWCapsResNet(hgw_cfg=HGW, **kw)
    blocks = ResNet.arch_settings[depth][1]
    assert count_caps(caps) == blocks[2] + blocks[3]
    assert caps.hgw_layers[0] == 'layer3.0.conv2'
    x = torch.randn(1, 3, 64, 32)
    with torch.no_grad():
        a, b = evaluated(stock)(x), evaluated(caps)(x)
    assert [t.shape for t in a] == [t.shape for t in b]


def test_resnet_frozen_stages_and_norm_eval_as_stock():
    from mmdet.models.backbones import ResNet
    torch.manual_seed(0)
    kw = dict(depth=50, base_channels=8, frozen_stages=3, norm_eval=True,
              init_cfg=None)
    stock, caps = ResNet(**kw), HGWCapsResNet(hgw_cfg=HGW, **kw)
    stock.train(), caps.train()
    stock_flags = dict(
        (n, p.requires_grad) for n, p in stock.named_parameters())
    for name, p in caps.named_parameters():
        if name in stock_flags:
            assert p.requires_grad == stock_flags[name], name
    # Capsules in frozen stage 3 are frozen; those of stage 4 train.
    assert not any(p.requires_grad for p in caps.layer3.parameters())
    assert all(p.requires_grad for p in caps.layer4[0].conv2.parameters())
    # Stock BNs are in eval mode; of the BNs after capsule layers, those of
    # frozen stage 3 too, those of stage 4 train.
    for name, m in batch_norms(caps).items():
        assert m.training == (name.startswith('layer4.') and 'hgw_' in name)


def test_resnet_with_cp_and_stage_flags():
    torch.manual_seed(0)
    caps = HGWCapsResNet(depth=18, base_channels=8, with_cp=True, hgw_cfg=HGW,
                         stage_with_hgw=(False, True, False, False),
                         init_cfg=None)
    assert caps.hgw_layers == ['layer2.0.conv2', 'layer2.1.conv2']
    x = torch.randn(2, 3, 32, 32, requires_grad=True)
    caps.train()
    sum(o.sum() for o in caps(x)).backward()
    assert torch.isfinite(x.grad).all()
    with pytest.raises(ValueError, match='stage_with_hgw must have one entry'):
        HGWCapsResNet(depth=18, stage_with_hgw=(True, ), init_cfg=None)


def test_plain_resnet_checkpoint_fills_non_capsule_layers(tmp_path):
    from mmdet.models.backbones import ResNet
    torch.manual_seed(1)
    stock = ResNet(depth=18, base_channels=8, init_cfg=None)
    path = tmp_path / 'resnet18_tiny.pth'
    torch.save({'state_dict': stock.state_dict()}, path)

    caps = HGWCapsResNet(
        depth=18, base_channels=8, hgw_cfg=HGW,
        init_cfg=dict(type='Pretrained', checkpoint=str(path)))
    messages = logged(caps.init_weights)
    caps_state = caps.state_dict()
    for name, value in stock.state_dict().items():
        if name in caps_state:
            torch.testing.assert_close(caps_state[name], value, msg=name)
        else:  # the replaced 3x3 convolutions and the norms after them
            assert name.startswith(('layer3', 'layer4'))
            assert '.conv2.' in name or '.bn2.' in name, name
    assert 'stay freshly initialised' in messages
    assert '8 of the 8 HGW capsule layers' in messages
    assert 'layer4.1.conv2' in messages and 'layer4.1.hgw_bn2' in messages


def small_caps_resnet(**kwargs):
    return HGWCapsResNet(depth=18, base_channels=8, hgw_cfg=HGW, **kwargs)


@pytest.mark.parametrize(
    'layout, prefix',
    [
        ('state_dict', None),  # as saved by a training run of the backbone
        ('bare', None),  # a bare state dict
        ('module.', None),  # DistributedDataParallel's keys
        ('backbone.', 'backbone.'),  # a whole model's, backbone selected
        ('backbone.', 'backbone'),  # mmengine appends the dot
    ])
def test_capsule_checkpoint_fills_everything_without_warning(
        tmp_path, layout, prefix):
    """A checkpoint of the HGWCaps backbone itself (as
    capsules_from_stock.py or a pretraining run writes it) fills the capsule
    layers and the norms after them: no warning, every tensor loaded."""
    torch.manual_seed(1)
    trained = small_caps_resnet(init_cfg=None)
    state = trained.state_dict()
    if layout == 'module.':
        state = {f'module.{k}': v for k, v in state.items()}
    elif layout == 'backbone.':
        state = {f'backbone.{k}': v for k, v in state.items()}
        state['neck.conv.weight'] = torch.zeros(2, 2)  # a model's extras
    path = tmp_path / 'hgwcaps_resnet18_tiny.pth'
    torch.save(state if layout == 'bare' else {'state_dict': state}, path)

    torch.manual_seed(2)
    init_cfg = dict(type='Pretrained', checkpoint=str(path))
    if prefix is not None:
        init_cfg['prefix'] = prefix
    caps = small_caps_resnet(init_cfg=init_cfg)
    messages = logged(caps.init_weights)
    assert 'stay freshly initialised' not in messages
    got = caps.state_dict()
    for name, value in trained.state_dict().items():
        assert torch.equal(got[name], value), name


def test_partial_capsule_checkpoint_names_only_what_it_lacks(tmp_path):
    """Capsule layers and norms whose keys are missing from the checkpoint,
    or have another shape there, are named; the others are not."""
    torch.manual_seed(1)
    state = {
        f'backbone.{k}': v
        for k, v in small_caps_resnet(init_cfg=None).state_dict().items()
        if not k.startswith(('layer4.1.conv2.', 'layer3.0.hgw_bn2.'))
    }
    # One buffer of the norm of another shape: mmengine skips it.
    state['backbone.layer4.0.hgw_bn2.running_mean'] = torch.zeros(3)
    path = tmp_path / 'partial.pth'
    torch.save({'state_dict': state}, path)
    caps = small_caps_resnet(init_cfg=dict(
        type='Pretrained', prefix='backbone.', checkpoint=str(path)))
    messages = logged(caps.init_weights)
    assert '3 of the 8 HGW capsule layers' in messages
    named = messages.split('stay freshly initialised: ', 1)[1].split(', ')
    assert sorted(named) == [
        'layer3.0.hgw_bn2', 'layer4.0.hgw_bn2', 'layer4.1.conv2'
    ]


def test_unreadable_checkpoint_keeps_naming_every_capsule_layer(tmp_path):
    """If the checkpoint cannot be read for the report, the warning names
    every capsule layer and norm, as nothing is known of its keys."""
    from mmhgw.models.backbones.capsule_swap import report_random_capsules
    path = tmp_path / 'broken.pth'
    path.write_bytes(b'not a checkpoint')
    # Built only: loading it through init_weights would fail.
    caps = small_caps_resnet(
        init_cfg=dict(type='Pretrained', checkpoint=str(path)))
    messages = logged(lambda: report_random_capsules(caps, caps.hgw_layers))
    assert '8 of the 8 HGW capsule layers' in messages
    assert 'layer3.0.conv2' in messages and 'layer4.1.hgw_bn2' in messages


def batch_norms(module):
    return {
        name: m
        for name, m in module.named_modules()
        if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)
    }


@pytest.mark.parametrize('frozen_stages', [-1, 3])
def test_resnet_norm_after_capsules_is_fresh_and_trains_under_norm_eval(
        tmp_path, frozen_stages):
    """The stock fine-tuning recipe (ImageNet weights, norm_eval=True): the
    BN after every capsule layer starts fresh and trains; all other BNs
    keep the checkpoint's statistics in eval mode, as stock."""
    from mmdet.models.backbones import ResNet
    torch.manual_seed(1)
    stock = ResNet(depth=18, base_channels=8, init_cfg=None)
    for m in batch_norms(stock).values():  # "pretrained" statistics
        m.running_mean.uniform_(-1, 1)
        m.running_var.uniform_(0.5, 2)
    path = tmp_path / 'resnet18_tiny.pth'
    torch.save({'state_dict': stock.state_dict()}, path)
    caps = HGWCapsResNet(
        depth=18, base_channels=8, hgw_cfg=HGW, norm_eval=True,
        frozen_stages=frozen_stages, init_cfg=dict(type='Pretrained',
                                                   checkpoint=str(path)))
    caps.init_weights()
    caps.train()
    fresh = {n: m for n, m in batch_norms(caps).items() if 'hgw_' in n}
    assert sorted(fresh) == [
        f'layer{s}.{b}.hgw_bn2' for s in (3, 4) for b in (0, 1)
    ]
    for name, m in fresh.items():
        assert caps.get_submodule(name.rsplit('.', 1)[0]).norm2 is m
        assert (m.running_mean == 0).all() and (m.running_var == 1).all()
        assert (m.weight == 1).all() and (m.bias == 0).all()
    # Frozen stages (here stage 3 when frozen_stages=3) stay frozen.
    frozen = {n for n in fresh if int(n[5]) <= frozen_stages}
    for name, m in fresh.items():
        assert m.training == (name not in frozen), name
        assert m.weight.requires_grad == (name not in frozen), name
    others = {n: m for n, m in batch_norms(caps).items() if n not in fresh}
    assert others and not any(m.training for m in others.values())
    before = {n: m.running_mean.clone() for n, m in batch_norms(caps).items()}
    caps(torch.randn(2, 3, 64, 64))
    for name, m in batch_norms(caps).items():
        moved = not torch.equal(m.running_mean, before[name])
        assert moved == (name in fresh and name not in frozen), name
        if name in others:
            torch.testing.assert_close(
                m.running_mean,
                stock.state_dict()[name + '.running_mean'])


def test_unet_norm_after_capsules_trains_under_norm_eval():
    init_default_scope('mmseg')
    caps = HGWCapsUNet(hgw_cfg=HGW, base_channels=8, norm_eval=True,
                       norm_cfg=dict(type='BN'))
    caps.train()
    fresh = {n: m for n, m in batch_norms(caps).items() if 'hgw_' in n}
    # Two 3x3 ConvModules in each of the two capsule blocks.
    assert len(fresh) == 4
    for name, m in fresh.items():
        owner = caps.get_submodule(name.rsplit('.', 1)[0])
        assert isinstance(owner.conv, HGWCaps) and owner.norm is m
        assert m.training
    assert not any(m.training
                   for n, m in batch_norms(caps).items() if n not in fresh)
    out = caps(torch.randn(2, 3, 32, 32))
    assert all(torch.isfinite(o).all() for o in out)


def test_resnet_v1c_keeps_dilations():
    from mmseg.models.backbones import ResNetV1c
    kw = dict(depth=50, base_channels=8, num_stages=4, strides=(1, 2, 1, 1),
              dilations=(1, 1, 2, 4), contract_dilation=True, init_cfg=None)
    init_default_scope('mmseg')
    stock = ResNetV1c(**kw)
    caps = HGWCapsResNetV1c(hgw_cfg=HGW, **kw)
    assert caps.layer4[1].conv2.embed.dilation == (4, 4)
    for name in ('layer3', 'layer4'):  # same geometry as the stock convs
        for ours, theirs in zip(getattr(caps, name), getattr(stock, name)):
            for attr in ('stride', 'padding', 'dilation'):
                assert getattr(ours.conv2.embed, attr) == \
                    getattr(theirs.conv2, attr)
    x = torch.randn(1, 3, 48, 40)
    with torch.no_grad():
        a, b = evaluated(stock)(x), evaluated(caps)(x)
    assert [t.shape for t in a] == [t.shape for t in b]


def test_unet_capsules_in_deepest_stages_and_shapes():
    from mmseg.models.backbones import UNet
    init_default_scope('mmseg')
    kw = dict(base_channels=8, norm_cfg=dict(type='BN'))
    stock, caps = UNet(**kw), HGWCapsUNet(hgw_cfg=HGW, **kw)
    assert caps.hgw_layers == ['encoder.4', 'decoder.3.conv_block']
    assert count_caps(caps.encoder[4]) == 2
    assert count_caps(caps.decoder[3]) == 2
    assert count_caps(caps) == 4
    x = torch.randn(1, 3, 64, 32)
    with torch.no_grad():
        a, b = evaluated(stock)(x), evaluated(caps)(x)
    assert [t.shape for t in a] == [t.shape for t in b]
    with pytest.raises(ValueError, match='dec_with_hgw'):
        HGWCapsUNet(hgw_cfg=HGW, dec_with_hgw=(True, ), **kw)
    # Capsules in the first stage meet the 3 image channels: the error
    # names that convolution, not only the layer's arguments.
    with pytest.raises(
            ValueError, match=r'capsules in place of Conv2d\(3, '
            r'8, .*\): in_channels=3 must be divisible by '
            r'in_types=4'):
        HGWCapsUNet(hgw_cfg=HGW, enc_with_hgw=(True, ) + (False, ) * 4, **kw)


def test_fpn_output_convs_become_capsules():
    from mmdet.models.necks import FPN
    kw = dict(in_channels=[8, 16, 32, 64], out_channels=16, num_outs=5,
              add_extra_convs='on_input')
    stock, caps = FPN(**kw), HGWCapsFPN(hgw_cfg=HGW, **kw)
    assert count_caps(caps) == 4  # the extra convolution stays stock
    assert count_caps(HGWCapsFPN(hgw_cfg=HGW, hgw_extra_convs=True, **kw)) == 5
    feats = [
        torch.randn(1, c, 32 // 2**i, 32 // 2**i)
        for i, c in enumerate([8, 16, 32, 64])
    ]
    with torch.no_grad():
        a, b = evaluated(stock)(feats), evaluated(caps)(feats)
    assert [t.shape for t in a] == [t.shape for t in b]


def test_capsule_like_keeps_the_whole_geometry_of_the_conv():
    """Non-square kernels, strides and paddings and the padding mode of
    the replaced convolution carry over; the converter's teacher is that
    convolution again."""
    from mmhgw.models.backbones import capsule_like
    from tools.model_converters.capsules_from_stock import replaced_conv
    conv = torch.nn.Conv2d(32, 32, (3, 1), stride=(2, 1), padding=(1, 0),
                           dilation=(1, 2), padding_mode='reflect')
    caps = capsule_like(
        conv,
        dict(type='HGWCaps', in_types=8, out_types=8, num_parts=3, part_dim=4))
    x = torch.randn(1, 32, 9, 8)
    with torch.no_grad():
        assert caps.eval()(x).shape == conv(x).shape
    teacher = replaced_conv(caps)
    geometry = ('kernel_size', 'stride', 'padding', 'dilation', 'padding_mode')
    for attr in geometry:
        assert getattr(caps.embed, attr) == getattr(conv, attr), attr
        assert getattr(teacher, attr) == getattr(conv, attr), attr
    assert (teacher.in_channels, teacher.out_channels) == (32, 32)
    assert (teacher.bias is None) == (conv.bias is None)


def test_backbones_are_plain_classes_registered_by_name(tmp_path):
    """Each capsule backbone is a class of its own module, found by its
    registered name, and a built one pickles (found by its name again)."""
    import pickle

    from mmdet.registry import MODELS as DET_MODELS
    from mmseg.registry import MODELS as SEG_MODELS

    from mmhgw.models.backbones import CapsuleSwapMixin
    for registry, cls in ((DET_MODELS, HGWCapsResNet),
                          (SEG_MODELS, HGWCapsResNetV1c), (SEG_MODELS,
                                                           HGWCapsUNet)):
        assert registry.get(cls.__name__) is cls
        assert issubclass(cls, CapsuleSwapMixin)
        module = __import__(cls.__module__, fromlist=[cls.__name__])
        assert getattr(module, cls.__qualname__) is cls
    torch.manual_seed(0)
    caps = small_caps_resnet(init_cfg=None)
    clone = pickle.loads(pickle.dumps(caps))
    assert type(clone) is HGWCapsResNet
    for key, value in caps.state_dict().items():
        assert torch.equal(clone.state_dict()[key], value), key
