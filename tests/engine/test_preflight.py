"""Config checks before the Runner starts: ``--cfg-options`` keys that would
set nothing fail naming the keys that work; torchvision:// weights without
torchvision fail with the ways on; the README's config example builds."""
import argparse
import inspect
import os.path as osp
import re
import sys
import types

import pytest
from mmengine.config import Config

import mmhgw  # noqa: F401
from mmhgw.config_utils import (add_runner_args, build_config_model,
                                config_from_args)
from mmhgw.engine.preflight import (RUNTIME_KEYS, check_weight_sources,
                                    matching_torchvision)

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
DEMO_DET = osp.join(ROOT,
                    'configs/demo/mask-rcnn_hgwcaps-r50_fpn_demo-shapes.py')
DEMO_SEG = osp.join(ROOT, 'configs/demo/unet-hgwcaps-s5-d16_fcn_demo-isic.py')


def tool_config(*argv, checkpoint=False):
    """``config_from_args`` for a train (or, with ``checkpoint``, test)
    command line."""
    parser = argparse.ArgumentParser()
    parser.add_argument('config')
    if checkpoint:
        parser.add_argument('checkpoint')
    add_runner_args(parser)
    return config_from_args(parser.parse_args(list(argv)))


def refusal(*argv, **kwargs) -> str:
    with pytest.raises(ValueError, match='--cfg-options') as info:
        tool_config(*argv, **kwargs)
    return str(info.value)


@pytest.mark.parametrize('config,places', [
    ('configs/mask_rcnn/mask-rcnn_hgwcaps-r50_hgwcaps-fpn_1x_coco.py',
     ['model.backbone.hgw_cfg', 'model.neck.hgw_cfg']),
    ('configs/ablations/unet-hgwcaps-ablA-s5-d16_fcn_demo-isic.py',
     ['model.backbone.hgw_cfg']),
    ('configs/pretrain/hgwcaps-cifar-resnet20_demo-shapes.py',
     ['model.backbone.hgw_cfg', 'model.head.routing_cfg']),
])
def test_hgw_cfg_override_names_the_keys_that_work(config, places):
    message = refusal(osp.join(ROOT, config), '--cfg-options',
                      'hgw_cfg.outer_iters=5')
    assert 'hgw_cfg.outer_iters: `hgw_cfg` is a variable' in message
    listed = re.findall(r'^  (\S+)$', message, re.M)
    assert listed == [f'{p}.outer_iters' for p in places]
    # ... and each of them does what the refused key did not.
    cfg = tool_config(osp.join(ROOT, config), '--cfg-options',
                      *[f'{key}=5' for key in listed])
    for key in listed:
        node = cfg
        for part in key.split('.'):
            node = node[part]
        assert node == 5


def test_file_variables_and_unknown_keys_are_refused_together():
    message = refusal(DEMO_DET, '--cfg-options', 'data_root=/data',
                      'train_pipeline.2.scale=(64,64)', 'warmup_iters=2',
                      'optim_wraper.lr=0.1', 'train_cfg.max_iters=3')
    assert 'data_root: `data_root` is a variable' in message
    for loader in ('train', 'val', 'test'):
        assert f'  {loader}_dataloader.dataset.data_root\n' in message
    assert '  train_dataloader.dataset.pipeline.2.scale\n' in message
    assert 'warmup_iters: `warmup_iters` is not a key of this config' in \
        message
    assert '  custom_hooks.0.warmup_iters\n' in message
    assert 'optim_wraper.lr: `optim_wraper` is not a key' in message
    assert '  optim_wrapper' in message
    assert 'train_cfg.max_iters' not in message  # a key that works


def test_default_only_and_command_line_keys_are_refused():
    message = refusal(DEMO_SEG, '--cfg-options',
                      'data_preprocessor.size=(8,8)')
    assert '`data_preprocessor` is only a default for `model.data_' \
        'preprocessor`' in message
    assert '  model.data_preprocessor.size' in message
    message = refusal(DEMO_SEG, 'ckpt.pth', '--work-dir', 'w', '--cfg-options',
                      'load_from=a.pth', 'work_dir=v', checkpoint=True)
    assert '`load_from` is set by the CHECKPOINT argument' in message
    assert '`work_dir` is set by --work-dir' in message


def test_keys_that_work_pass_and_take_effect():
    cfg = tool_config(DEMO_SEG, '--cfg-options',
                      'model.backbone.hgw_cfg.outer_iters=2',
                      'train_cfg.max_iters=3', 'randomness.seed=1',
                      'custom_imports.imports=[json.tool]')
    assert cfg.model.backbone.hgw_cfg.outer_iters == 2
    assert cfg.train_cfg.max_iters == 3 and cfg.randomness.seed == 1
    # Imported although the file's own imports ran before the merge.
    assert 'json.tool' in sys.modules


def test_runtime_keys_cover_what_the_runners_read():
    from mmengine.runner import FlexibleRunner, Runner
    read = set()
    for method in (Runner.from_cfg, FlexibleRunner.from_cfg):
        read |= set(
            re.findall(r"cfg(?:\.get\(|\[)'(\w+)'", inspect.getsource(method)))
    for cls in (Runner, FlexibleRunner):
        read |= set(
            re.findall(r"self\.cfg\.get\(\s*'(\w+)'", inspect.getsource(cls)))
    assert 'train_dataloader' in read and 'compile' in read
    assert read <= RUNTIME_KEYS, read - RUNTIME_KEYS


def with_torchvision(monkeypatch, importable: bool):
    monkeypatch.setitem(
        sys.modules, 'torchvision',
        types.ModuleType('torchvision') if importable else None)


def test_torchvision_weights_without_torchvision_say_how_to_proceed(
        monkeypatch):
    cfg = Config.fromfile(
        osp.join(ROOT,
                 'configs/mask_rcnn/mask-rcnn_hgwcaps-r50_fpn_1x_coco.py'))
    with_torchvision(monkeypatch, importable=True)
    check_weight_sources(cfg)
    with_torchvision(monkeypatch, importable=False)
    with pytest.raises(RuntimeError) as info:
        check_weight_sources(cfg)
    message = str(info.value)
    assert "model.backbone.init_cfg.checkpoint = 'torchvision://resnet50'" \
        in message
    assert 'pip install --no-deps torchvision==' in message
    assert '--cfg-options model.backbone.init_cfg=None' in message
    assert 'model.backbone.init_cfg.checkpoint=PATH' in message
    cfg.model.backbone.init_cfg = None
    check_weight_sources(cfg)  # nothing loads through torchvision


def test_matching_torchvision_release():
    assert matching_torchvision('2.13.0+cu130') == '0.28.0'
    assert matching_torchvision('2.0.1') == '0.15.1'
    assert matching_torchvision('1.13.1') is None


def readme_config_example() -> str:
    with open(osp.join(ROOT, 'README.md')) as f:
        text = f.read()
    section = text.split('## Using it from a config', 1)[1]
    return section.split('```python\n', 1)[1].split('```', 1)[0]


def test_readme_config_example_builds_and_says_its_one_step(
        tmp_path, monkeypatch):
    path = tmp_path / 'readme_example.py'
    path.write_text(readme_config_example())
    cfg = tool_config(str(path))
    assert cfg.model.backbone.init_cfg.checkpoint == 'torchvision://resnet50'
    model = build_config_model(cfg, init=False)
    assert type(model.backbone).__name__ == 'HGWCapsResNet'
    # Without torchvision, train.py stops before the Runner with the step
    # the README names in the section's first lines.
    with_torchvision(monkeypatch, importable=False)
    with pytest.raises(RuntimeError, match='model.backbone.init_cfg=None'):
        check_weight_sources(cfg)
    with open(osp.join(ROOT, 'README.md')) as f:
        intro = f.read().split('## Using it from a config', 1)[1]
    assert '`--cfg-options model.backbone.init_cfg=None`' in \
        intro.split('```python', 1)[0]
    cfg = tool_config(str(path), '--cfg-options',
                      'model.backbone.init_cfg=None')
    check_weight_sources(cfg)
    build_config_model(cfg, init=True)  # offline initialisation works
