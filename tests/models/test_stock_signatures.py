"""HGWCaps backbones and neck take every stock argument where the stock class
takes it, positionally included, as upstream code and tests call them."""
import inspect
from collections import OrderedDict

import pytest
import torch
from mmengine.registry import init_default_scope

import mmhgw  # noqa: F401
from mmhgw.models import HGWCaps
from mmhgw.models.backbones import HGWCapsResNet, HGWCapsResNetV1c, HGWCapsUNet
from mmhgw.models.necks import HGWCapsFPN

HGW = dict(type='HGWCaps', in_types=4, out_types=4, num_parts=3, part_dim=4)


def count_caps(module):
    return sum(isinstance(m, HGWCaps) for m in module.modules())


def stock_parameters(cls):
    return [
        n for n in inspect.signature(cls.__init__).parameters if n != 'self'
    ]


def check_same_as_stock(stock, caps, args, replaced):
    """Every stock argument stored by the stock class is stored alike, and
    every module outside the capsule layers has the stock names and shapes
    (the fresh norm after a capsule layer is the stock one renamed
    ``hgw_<name>``)."""
    for name in args:
        if hasattr(stock, name):
            assert getattr(caps, name) == getattr(stock, name), name
    ours = {
        k.replace('.hgw_', '.'): v.shape
        for k, v in caps.state_dict().items()
        if not any(k.startswith(r + '.') for r in replaced)
    }
    theirs = {
        k: v.shape
        for k, v in stock.state_dict().items()
        if not any(k.startswith(r + '.') for r in replaced)
    }
    assert ours == theirs


def evaluated(module):
    module.eval()
    return module


@pytest.mark.parametrize(
    'cls', ['HGWCapsResNet', 'HGWCapsResNetV1c', 'HGWCapsUNet', 'HGWCapsFPN'])
def test_capsule_options_are_keyword_only(cls):
    cls = dict(HGWCapsResNet=HGWCapsResNet, HGWCapsResNetV1c=HGWCapsResNetV1c,
               HGWCapsUNet=HGWCapsUNet, HGWCapsFPN=HGWCapsFPN)[cls]
    params = inspect.signature(cls.__init__).parameters
    ours = [n for n, p in params.items() if p.kind == p.KEYWORD_ONLY]
    assert 'hgw_cfg' in ours
    assert list(params)[1] == 'args'


def test_layer_takes_conv2d_arguments_in_conv2d_order():
    """The capsule layer replaces a convolution: ``nn.Conv2d``'s arguments
    stand first, in its order, so a positional call means the same."""
    conv = stock_parameters(torch.nn.Conv2d)
    conv = conv[:conv.index('padding_mode') + 1]
    assert stock_parameters(HGWCaps)[:len(conv)] == conv
    caps = HGWCaps(64, 64, 3, 2, 1, 1, 1, True, 'reflect')
    assert (caps.embed.stride, caps.embed.padding,
            caps.embed.padding_mode) == ((2, 2), (1, 1), 'reflect')
    assert caps.bias is not None


def test_upstream_positional_calls():
    """The calls of the upstream docs and tests, unchanged but the class."""
    init_default_scope('mmdet')
    resnet = HGWCapsResNet(50)
    assert resnet.depth == 50 and count_caps(resnet) == 6 + 3
    fpn = HGWCapsFPN([256, 512, 1024, 2048], 256, 5)
    assert fpn.in_channels == [256, 512, 1024, 2048]
    assert fpn.out_channels == 256 and fpn.num_outs == 5
    assert count_caps(fpn) == 4
    init_default_scope('mmseg')
    unet = HGWCapsUNet(3, 64, 5)
    assert unet.num_stages == 5 and unet.base_channels == 64
    assert count_caps(unet) == 4
    # A misplaced capsule option fails as the stock class would.
    with pytest.raises(TypeError):
        HGWCapsResNet(18, HGW)


def test_resnet_every_stock_argument_positionally():
    from mmdet.models.backbones import ResNet
    args = OrderedDict(
        depth=18, in_channels=4, stem_channels=16, base_channels=8,
        num_stages=4, strides=(1, 2, 2, 1), dilations=(1, 1, 1, 2),
        out_indices=(1, 2, 3), style='caffe', deep_stem=True, avg_down=True,
        frozen_stages=1, conv_cfg=None, norm_cfg=dict(type='BN',
                                                      requires_grad=True),
        norm_eval=True, dcn=None, stage_with_dcn=(False, False, False,
                                                  False), plugins=None,
        with_cp=True, zero_init_residual=False, pretrained=None, init_cfg=None)
    assert list(args) == stock_parameters(ResNet)
    torch.manual_seed(0)
    stock = ResNet(*args.values())
    caps = HGWCapsResNet(*args.values(), hgw_cfg=HGW)
    replaced = [f'layer{s}.{b}.conv2' for s in (3, 4) for b in (0, 1)]
    assert sorted(caps.hgw_layers) == sorted(replaced)
    check_same_as_stock(stock, caps, args, replaced)
    for ours, theirs in zip(caps.layer4, stock.layer4):
        for attr in ('stride', 'padding', 'dilation'):
            assert getattr(ours.conv2.embed, attr) == \
                getattr(theirs.conv2, attr)
    # frozen_stages=1 froze the stem and stage 1 after the swap too.
    assert not any(p.requires_grad for p in caps.layer1.parameters())
    x = torch.randn(1, 4, 32, 32)
    with torch.no_grad():
        a, b = evaluated(stock)(x), evaluated(caps)(x)
    assert [t.shape for t in a] == [t.shape for t in b]
    assert len(b) == 3


def test_resnet_v1c_every_stock_argument_by_keyword():
    # The stock ResNetV1c takes keywords only (it fixes deep_stem and
    # avg_down itself); so does its capsule subclass.
    from mmseg.models.backbones import ResNet, ResNetV1c
    init_default_scope('mmseg')
    args = OrderedDict(depth=18, in_channels=3, stem_channels=16,
                       base_channels=8, num_stages=4, strides=(1, 2, 1, 1),
                       dilations=(1, 1, 2, 4), out_indices=(0, 3),
                       style='pytorch', frozen_stages=-1, conv_cfg=None,
                       norm_cfg=dict(type='BN', requires_grad=True),
                       norm_eval=True, dcn=None, stage_with_dcn=(False, ) * 4,
                       plugins=None, multi_grid=(1, 2), contract_dilation=True,
                       with_cp=False, zero_init_residual=False,
                       pretrained=None, init_cfg=None)
    fixed = {'deep_stem', 'avg_down'}
    assert list(args) == [
        n for n in stock_parameters(ResNet) if n not in fixed
    ]
    stock = ResNetV1c(**args)
    caps = HGWCapsResNetV1c(**args, hgw_cfg=HGW)
    replaced = [f'layer{s}.{b}.conv2' for s in (3, 4) for b in (0, 1)]
    check_same_as_stock(stock, caps, args, replaced)
    # multi_grid and contract_dilation reach the capsules' geometry.
    for ours, theirs in zip(caps.layer4, stock.layer4):
        assert ours.conv2.embed.dilation == theirs.conv2.dilation
    x = torch.randn(1, 3, 32, 32)
    with torch.no_grad():
        a, b = evaluated(stock)(x), evaluated(caps)(x)
    assert [t.shape for t in a] == [t.shape for t in b]


def test_unet_every_stock_argument_positionally():
    from mmseg.models.backbones import UNet
    init_default_scope('mmseg')
    args = OrderedDict(in_channels=2, base_channels=8, num_stages=4,
                       strides=(1, 1, 1, 1), enc_num_convs=(2, 2, 2, 1),
                       dec_num_convs=(2, 2, 1), downsamples=(True, True,
                                                             False),
                       enc_dilations=(1, 1, 1, 2), dec_dilations=(1, 1, 2),
                       with_cp=True, conv_cfg=None, norm_cfg=dict(type='BN'),
                       act_cfg=dict(type='ReLU'),
                       upsample_cfg=dict(type='InterpConv'), norm_eval=True,
                       dcn=None, plugins=None, pretrained=None, init_cfg=None)
    assert list(args) == stock_parameters(UNet)
    torch.manual_seed(0)
    stock = UNet(*args.values())
    caps = HGWCapsUNet(*args.values(), hgw_cfg=HGW)
    assert caps.hgw_layers == ['encoder.3', 'decoder.2.conv_block']
    # enc_num_convs / dec_num_convs of the deepest stages: one conv each.
    assert count_caps(caps) == 2
    replaced = [
        'encoder.3.0.convs.0.conv', 'decoder.2.conv_block.convs.0.conv'
    ]
    check_same_as_stock(stock, caps, args, replaced)
    ours = caps.encoder[3][0].convs[0].conv.embed
    theirs = stock.encoder[3][0].convs[0].conv
    for attr in ('stride', 'padding', 'dilation'):
        assert getattr(ours, attr) == getattr(theirs, attr)
    x = torch.randn(1, 2, 16, 16)
    with torch.no_grad():
        a, b = evaluated(stock)(x), evaluated(caps)(x)
    assert [t.shape for t in a] == [t.shape for t in b]


def test_fpn_every_stock_argument_positionally():
    from mmdet.models.necks import FPN
    args = OrderedDict(in_channels=[8, 16, 32,
                                    64], out_channels=16, num_outs=5,
                       start_level=1, end_level=-1, add_extra_convs='on_input',
                       relu_before_extra_convs=True, no_norm_on_lateral=True,
                       conv_cfg=None, norm_cfg=None, act_cfg=None,
                       upsample_cfg=dict(mode='bilinear'), init_cfg=None)
    assert list(args) == stock_parameters(FPN)
    stock = FPN(*args.values())
    caps = HGWCapsFPN(*args.values(), hgw_cfg=HGW)
    # start_level=1: three levels with capsules, two extra convs stay stock.
    assert count_caps(caps) == 3
    replaced = [f'fpn_convs.{i}.conv' for i in range(3)]
    check_same_as_stock(stock, caps, args, replaced)
    feats = [
        torch.randn(1, c, 32 // 2**i, 32 // 2**i)
        for i, c in enumerate([8, 16, 32, 64])
    ]
    with torch.no_grad():
        a, b = evaluated(stock)(feats), evaluated(caps)(feats)
    assert [t.shape for t in a] == [t.shape for t in b]
