"""Shared fixtures: a reduced HGWCaps segmentation config on generated data;
MMPretrain's modules registered for the session."""
import importlib
import importlib.util
import os.path as osp
import sys
import textwrap

import pytest

from mmhgw.datasets.synthetic import make_isic_lesions

ROOT = osp.dirname(osp.dirname(osp.abspath(__file__)))
DEMO_SEG = osp.join(ROOT, 'configs/demo/unet-hgwcaps-s5-d16_fcn_demo-isic.py')
TORCHVISION_STAND_IN = osp.join(ROOT, 'tests', 'stubs')


def import_mmpretrain() -> bool:
    """Import and register MMPretrain's modules once; False without it.

    MMPretrain imports torchvision at module level. Where no torchvision
    build matches the installed torch, the stand-in under ``tests/stubs`` is
    on ``sys.path`` only while MMPretrain's modules load; afterwards
    ``import torchvision`` fails again as before, for every other test.
    """
    if importlib.util.find_spec('mmpretrain') is None:
        return False
    try:
        import torchvision  # noqa: F401
        stand_in = False
    except Exception:  # missing, or built for another torch
        stand_in = True
    if stand_in:
        for name in [
                m for m in sys.modules if m.split('.')[0] == 'torchvision'
        ]:
            del sys.modules[name]
        sys.path.insert(0, TORCHVISION_STAND_IN)
    try:
        from mmpretrain.utils import register_all_modules
        register_all_modules(init_default_scope=False)
    finally:
        if stand_in:
            sys.path.remove(TORCHVISION_STAND_IN)
            for name in [
                    m for m in sys.modules if m.split('.')[0] == 'torchvision'
            ]:
                del sys.modules[name]
    return True


MMPRETRAIN = import_mmpretrain()


def write_reduced_seg_config(tmp_path, num_train=40, num_val=10):
    """The demo HGWCaps UNet, narrowed (base 16 channels, 8 capsule types),
    on 64x64 generated lesions (the easy level: these tests are about the
    training machinery, not the data), with a deterministic pipeline and no
    dropout so that runs are exactly repeatable."""
    data = tmp_path / 'ISIC2018'
    make_isic_lesions(str(data), num_train=num_train, num_val=num_val,
                      size=(64, 64), seed=1, level='easy')
    path = tmp_path / 'reduced_unet_hgw.py'
    path.write_text(
        textwrap.dedent(f"""
        _base_ = [{DEMO_SEG!r}]
        data_root = {str(data)!r}
        crop_size = (64, 64)
        model = dict(
            data_preprocessor=dict(size=crop_size),
            backbone=dict(base_channels=16, hgw_cfg=dict(
                in_types=8, out_types=8, num_parts=4, part_dim=4)),
            decode_head=dict(in_channels=16, channels=16, dropout_ratio=0),
            auxiliary_head=dict(in_channels=32, channels=16,
                                dropout_ratio=0))
        pipeline = [
            dict(type='LoadImageFromFile'),
            dict(type='LoadAnnotations'),
            dict(type='Resize', scale=crop_size, keep_ratio=False),
            dict(type='PackSegInputs')
        ]
        train_dataloader = dict(
            batch_size=4,
            dataset=dict(data_root=data_root, pipeline=pipeline))
        val_dataloader = dict(
            dataset=dict(data_root=data_root, pipeline=pipeline))
        test_dataloader = val_dataloader
        optim_wrapper = dict(optimizer=dict(lr=0.05))
        randomness = dict(seed=0, deterministic=True)
        custom_hooks = [
            dict(type='HGWBetaWarmupHook', warmup_iters=10),
            dict(type='HGWLossScaleHook'),
            dict(type='RankConsistencyHook')
        ]
        default_hooks = dict(logger=dict(interval=1))
    """))
    return path


@pytest.fixture
def reduced_seg_config():
    """``write_reduced_seg_config(tmp_path, num_train, num_val) -> path``."""
    return write_reduced_seg_config


@pytest.fixture
def seg_config(tmp_path):
    """A small HGWCaps UNet config on two generated images."""
    return str(write_reduced_seg_config(tmp_path, num_train=2, num_val=2))


@pytest.fixture
def seg_checkpoint(seg_config, tmp_path):
    """A checkpoint of ``seg_config``'s model, freshly initialised."""
    import torch

    from mmhgw.config_utils import build_config_model, load_offline_config
    model = build_config_model(load_offline_config(seg_config))
    path = tmp_path / 'model.pth'
    torch.save(dict(state_dict=model.state_dict(), meta={}), path)
    return str(path)


@pytest.fixture
def seg_checkpoint_copy(seg_checkpoint, tmp_path):
    """Another file with ``seg_checkpoint``'s weights: a second trained
    model for the tools that refuse one checkpoint given twice."""
    import shutil
    path = tmp_path / 'model_copy.pth'
    shutil.copy(seg_checkpoint, path)
    return str(path)
