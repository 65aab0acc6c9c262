"""Pretraining with MMPretrain: the models of the paper's classification
setting, a few iterations through MMPretrain's Runner on the generated
shape set, and checkpoints that load into the detection and segmentation
backbones with every capsule key matched."""
import os.path as osp
import textwrap

import pytest
import torch

from mmhgw.datasets import make_shape_classification
from mmhgw.models import HGWCaps

pytest.importorskip('mmpretrain')

from mmhgw.models.heads import margin_loss  # noqa: E402

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.dirname(
    osp.abspath(__file__)))))
DEMO_CLS = osp.join(ROOT,
                    'configs/pretrain/hgwcaps-cifar-resnet20_demo-shapes.py')
SMALL_HGW = dict(type='HGWCaps', num_parts=2, part_dim=2, outer_iters=1,
                 inner_iters=2)


def test_registered_in_mmpretrain():
    from mmpretrain.registry import MODELS
    for name in ('HGWCapsResNet', 'HGWCapsResNetV1c', 'CIFARResNet',
                 'HGWCapsCIFARResNet', 'CapsulePoolNeck', 'ClassCapsuleHead'):
        assert name in MODELS.module_dict, name


def test_cifar_resnet_paper_setting():
    """Three stages of 16/32/64 channels at 32/16/8 pixels; capsules of
    dimension 2 (32 types) in every block of the last stage only."""
    from mmhgw.models.classification import HGWCapsCIFARResNet
    net = HGWCapsCIFARResNet(depth=20, hgw_cfg=SMALL_HGW, init_cfg=None)
    caps = {n: m for n, m in net.named_modules() if isinstance(m, HGWCaps)}
    assert sorted(caps) == [
        'layer3.0.conv2', 'layer3.1.conv2', 'layer3.2.conv2'
    ]
    assert all(m.in_types == 32 and m.out_dim == 2 for m in caps.values())
    out = net(torch.randn(1, 3, 32, 32))
    assert len(out) == 1 and out[0].shape == (1, 64, 8, 8)


@pytest.mark.parametrize('frozen_stages', [-1, 2, 3])
def test_cifar_resnet_norm_after_capsules_trains_under_norm_eval(
        frozen_stages):
    """As the detection backbones: under ``norm_eval=True`` the fresh BN
    after every capsule layer (``hgw_bn2``) trains, unless its stage is
    frozen; every other BN stays in eval mode."""
    from mmhgw.models.classification import HGWCapsCIFARResNet
    net = HGWCapsCIFARResNet(depth=20, hgw_cfg=SMALL_HGW, norm_eval=True,
                             frozen_stages=frozen_stages, init_cfg=None)
    returned = net.train()
    norms = {
        n: m
        for n, m in net.named_modules()
        if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)
    }
    fresh = {n for n in norms if n.rsplit('.', 1)[-1] == 'hgw_bn2'}
    assert sorted(fresh) == [f'layer3.{b}.hgw_bn2' for b in range(3)]
    # Stage 3 (layer3, the capsule stage) is frozen when frozen_stages=3.
    capsule_stage_trains = frozen_stages < 3
    for name, m in norms.items():
        assert m.training == (name in fresh and capsule_stage_trains), name
    assert returned is net  # chained as nn.Module.train() is
    net.eval()
    assert not any(m.training for m in norms.values())


def test_class_capsule_head_scores_and_loss():
    from mmpretrain.structures import DataSample

    from mmhgw.models.heads import ClassCapsuleHead
    torch.manual_seed(0)
    head = ClassCapsuleHead(num_classes=5, in_channels=64, class_dim=4,
                            routing_cfg=SMALL_HGW)
    feats = (torch.randn(3, 64), )
    scores = head(feats)
    assert scores.shape == (3, 5)
    assert (scores >= 0).all() and (scores <= 1).all()
    # The best-aligned class has length 1: lengths are the scores.
    assert torch.allclose(scores.max(1).values, torch.ones(3), atol=1e-4)
    samples = [DataSample().set_gt_label(k) for k in (0, 3, 4)]
    loss = head.loss(feats, samples)['loss']
    loss.backward()
    assert head.routing.subcapsules.grad.abs().sum() > 0
    preds = head.predict(feats)
    assert [int(p.pred_label) for p in preds] == scores.argmax(1).tolist()


def test_margin_loss_values():
    lengths = torch.tensor([[0.95, 0.05], [0.5, 0.6]])
    target = torch.tensor([[1., 0.], [1., 0.]])
    # Sample 1 inside both margins; sample 2: (0.9-0.5)^2 + 0.5 (0.6-0.1)^2.
    expected = (0 + (0.16 + 0.5 * 0.25)) / 2
    assert margin_loss(lengths, target).item() == pytest.approx(expected)


def test_capsule_pool_neck_equals_mean_pool_unweighted():
    from mmhgw.models.classification import CapsulePoolNeck
    x = torch.randn(2, 64, 4, 4)
    out, = CapsulePoolNeck(num_types=32, weighted=False)((x, ))
    assert torch.allclose(out, x.mean((2, 3)), atol=1e-6)
    weighted, = CapsulePoolNeck(num_types=32)((x, ))
    assert weighted.shape == (2, 64)
    assert not torch.allclose(weighted, out)


def test_shape_classification_set(tmp_path):
    meta = make_shape_classification(str(tmp_path), num_train=8, num_val=4)
    lines = (tmp_path / 'meta' / 'train.txt').read_text().split()
    paths, labels = lines[0::2], [int(v) for v in lines[1::2]]
    assert len(paths) == 8 and sorted(set(labels)) == [0, 1, 2, 3]
    for path, label in zip(paths, labels):
        assert path.split('/')[0] == meta['classes'][label]
        assert (tmp_path / 'train' / path).is_file()
    again = tmp_path / 'again'
    make_shape_classification(str(again), num_train=8, num_val=4)
    first = sorted((tmp_path / 'train').rglob('*.png'))[0]
    assert first.read_bytes() == (again /
                                  first.relative_to(tmp_path)).read_bytes()


def test_demo_config_trains_through_mmpretrain_runner(tmp_path):
    """The paper's CIFAR setting (depth 20, narrowed routing) trains and
    evaluates a few iterations through MMPretrain's Runner on the generated
    set; the saved classifier checkpoint has the capsule layers' keys."""
    from mmengine.config import Config
    from mmengine.runner import Runner
    data = tmp_path / 'shapes'
    make_shape_classification(str(data), num_train=8, num_val=4)
    cfg_path = tmp_path / 'cfg.py'
    cfg_path.write_text(
        textwrap.dedent(f"""
        _base_ = [{DEMO_CLS!r}]
        small = {SMALL_HGW!r}
        model = dict(backbone=dict(hgw_cfg=small),
                     head=dict(class_dim=4, routing_cfg=small))
        train_dataloader = dict(batch_size=4, dataset=dict(
            data_root={str(data)!r}))
        val_dataloader = dict(batch_size=4, dataset=dict(
            data_root={str(data)!r}))
        test_dataloader = val_dataloader
        train_cfg = dict(max_iters=3, val_interval=3)
        param_scheduler = dict(T_max=3)
        default_hooks = dict(logger=dict(interval=1),
                             checkpoint=dict(interval=3))
        custom_hooks = [dict(type='HGWBetaWarmupHook', warmup_iters=2)]
        randomness = dict(seed=0)
    """))
    cfg = Config.fromfile(str(cfg_path))
    cfg.work_dir = str(tmp_path / 'work')
    runner = Runner.from_cfg(cfg)
    before = {k: v.clone() for k, v in runner.model.state_dict().items()}
    runner.train()
    metrics = runner.val_loop.run()
    assert 0 <= metrics['accuracy/top1'] <= 100
    after = runner.model.state_dict()
    moved = [
        k for k in after
        if 'subcapsules' in k and not torch.equal(before[k], after[k])
    ]
    assert moved, 'capsule layers did not train'
    ckpt = torch.load(osp.join(cfg.work_dir, 'iter_3.pth'), map_location='cpu',
                      weights_only=False)
    assert 'backbone.layer3.0.conv2.subcapsules' in ckpt['state_dict']


def _save_classifier_checkpoint(backbone, path):
    state = {f'backbone.{k}': v for k, v in backbone.state_dict().items()}
    state['head.fc.weight'] = torch.zeros(10, 8)  # a classifier's extras
    torch.save(dict(state_dict=state, meta=dict()), path)


@pytest.mark.parametrize('cls_type, task', [('HGWCapsResNet', 'det'),
                                            ('HGWCapsResNetV1c', 'seg')])
def test_classifier_checkpoint_loads_into_task_backbone(
        tmp_path, cls_type, task):
    """A checkpoint of the MMPretrain-registered backbone (saved as a
    classifier, ``backbone.`` prefix) fills the detection / segmentation
    backbone through ``init_cfg=Pretrained(prefix='backbone.')``: every key,
    capsule layers included, equal to the saved tensor."""
    from mmengine.registry import init_default_scope
    from mmpretrain.registry import MODELS as CLS

    from mmhgw.registry import DET_MODELS, SEG_MODELS
    task_models = DET_MODELS if task == 'det' else SEG_MODELS
    args = dict(type=cls_type, depth=18, base_channels=8, out_indices=(3, ),
                hgw_cfg=dict(SMALL_HGW, in_types=4, out_types=4))
    init_default_scope('mmpretrain')
    torch.manual_seed(0)
    trained = CLS.build(dict(args, norm_eval=False))
    trained.init_weights()
    path = str(tmp_path / 'cls.pth')
    _save_classifier_checkpoint(trained, path)

    torch.manual_seed(1)
    target = task_models.build(
        dict(
            args, out_indices=(0, 1, 2, 3),
            init_cfg=dict(type='Pretrained', prefix='backbone.',
                          checkpoint=path)))
    target.init_weights()
    want, got = trained.state_dict(), target.state_dict()
    assert set(want) == set(got)
    caps_keys = [k for k in got if 'subcapsules' in k]
    assert len(caps_keys) == 4  # two blocks in each of stages 3 and 4
    for key in got:
        assert torch.equal(want[key], got[key]), key
