"""Resume is exact with dropout and random augmentation: the generators'
states travel in the checkpoint (RNGStateHook)."""
import os.path as osp
import random
import textwrap

import numpy as np
import pytest
import torch
from mmengine.config import Config
from mmengine.runner import Runner

import mmhgw  # noqa: F401
from mmhgw.datasets.synthetic import make_isic_lesions
from mmhgw.engine.hooks.rng_state import get_rng_state, set_rng_state

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
STOCK_DEMO_UNET = osp.join(ROOT, 'configs/demo/unet-s5-d16_fcn_demo-isic.py')


def test_state_round_trip_through_a_weights_only_checkpoint(tmp_path):
    random.seed(3), np.random.seed(3), torch.manual_seed(3)
    np.random.randn()  # leaves a cached gaussian in numpy's state
    state = get_rng_state()
    torch.save({'rng_state': [state]}, tmp_path / 'c.pth')
    expected = (random.random(), np.random.randn(3), torch.rand(3))
    random.seed(0), np.random.seed(0), torch.manual_seed(0)
    set_rng_state(torch.load(tmp_path / 'c.pth')['rng_state'][0])
    assert random.random() == expected[0]
    assert (np.random.randn(3) == expected[1]).all()
    assert torch.equal(torch.rand(3), expected[2])


def tiny_unet_config(tmp_path):
    """The stock demo UNet as shipped (dropout 0.1 in both heads; random
    resize, crop and flip), narrowed to 4 base channels on 40x40 images,
    validated at every checkpoint (validation draws from the generators
    too)."""
    data = tmp_path / 'ISIC2018'
    make_isic_lesions(str(data), num_train=10, num_val=2, size=(40, 40),
                      seed=2)
    path = tmp_path / 'tiny_unet.py'
    path.write_text(
        textwrap.dedent(f"""
        _base_ = [{STOCK_DEMO_UNET!r}]
        data_root = {str(data)!r}
        crop_size = (32, 32)
        model = dict(
            data_preprocessor=dict(size=crop_size),
            backbone=dict(base_channels=4),
            decode_head=dict(in_channels=4, channels=8),
            auxiliary_head=dict(in_channels=8, channels=8))
        train_pipeline = [
            dict(type='LoadImageFromFile'),
            dict(type='LoadAnnotations'),
            dict(type='RandomResize', scale=crop_size,
                 ratio_range=(0.8, 1.25), keep_ratio=True),
            dict(type='RandomCrop', crop_size=crop_size),
            dict(type='RandomFlip', prob=0.5),
            dict(type='PackSegInputs')
        ]
        train_dataloader = dict(
            batch_size=2,
            dataset=dict(data_root=data_root, pipeline=train_pipeline))
        val_dataloader = dict(dataset=dict(data_root=data_root))
        test_dataloader = val_dataloader
        train_cfg = dict(max_iters=6, val_interval=3)
        default_hooks = dict(checkpoint=dict(interval=3),
                             logger=dict(interval=1))
    """))
    return path


def train(config, work_dir, max_iters, resume_from=None, **options):
    cfg = Config.fromfile(str(config))
    cfg.merge_from_dict(options)
    cfg.work_dir = str(work_dir)
    cfg.experiment_name = osp.basename(work_dir) + str(max_iters)
    cfg.train_cfg.max_iters = max_iters
    if resume_from is not None:
        cfg.resume, cfg.load_from = True, str(resume_from)
    runner = Runner.from_cfg(cfg)
    runner.train()
    return runner


@pytest.mark.parametrize('seed', [0, None])
def test_resume_is_exact_with_dropout_and_random_augmentation(tmp_path, seed):
    config = tiny_unet_config(tmp_path)
    cfg = Config.fromfile(str(config))
    # The shipped config has what this test is about.
    assert cfg.model.decode_head.dropout_ratio > 0
    assert any(t.type == 'RandomFlip' for t in cfg.train_pipeline)
    assert any(h.type == 'RNGStateHook' for h in cfg.custom_hooks)

    # Resumed from the uninterrupted run's own mid-way checkpoint. Without a
    # seed in the config (mmseg's default) each run draws a random one.
    train(config, tmp_path / 'straight', 6, randomness=dict(seed=seed))
    saved = torch.load(tmp_path / 'straight' / 'iter_3.pth')
    assert len(saved['rng_state']) == 1  # one process
    train(config, tmp_path / 'resumed', 6, randomness=dict(seed=seed),
          resume_from=tmp_path / 'straight' / 'iter_3.pth')

    a = torch.load(tmp_path / 'straight' / 'iter_6.pth')['state_dict']
    b = torch.load(tmp_path / 'resumed' / 'iter_6.pth')['state_dict']
    assert a.keys() == b.keys()
    differ = [k for k in a if not torch.equal(a[k], b[k])]
    assert not differ, f'{len(differ)}/{len(a)} tensors differ: {differ[:5]}'
    # The run did move the weights away from the checkpoint.
    mid = saved['state_dict']
    assert any(not torch.equal(mid[k], a[k]) for k in a)


def fake_runner():
    """A stand-in Runner at iteration 3 whose logger keeps its warnings in
    ``FakeRunner.warnings``."""

    class FakeRunner:
        iter = 3
        warnings = []

        class logger:

            @staticmethod
            def warning(msg):
                FakeRunner.warnings.append(msg)

    return FakeRunner


def test_world_size_mismatch_warns_and_skips(tmp_path):
    from mmhgw.engine.hooks import RNGStateHook

    FakeRunner = fake_runner()
    hook = RNGStateHook()
    hook.after_load_checkpoint(
        FakeRunner, dict(meta=dict(iter=3), rng_state=[get_rng_state()] * 2))
    assert hook._pending is None
    assert 'states of 2 processes' in FakeRunner.warnings[0]


def malformed_states():
    good = get_rng_state()
    numpy_keys = dict(good['numpy'], keys=7)
    return {
        'an int': (5, 'must be a list of per-rank states'),
        'an int per rank': ([5], r'rng_state\[0\] must be a dict'),
        'no python state': ([{k: v
                              for k, v in good.items() if k != 'python'}],
                            r"rng_state\[0\] lacks the 'python'"),
        'python state an int': ([dict(good, python=3)],
                                r'rng_state\[0\]\.python is not'),
        'numpy keys an int': ([dict(good, numpy=numpy_keys)],
                              r'rng_state\[0\]\.numpy is not'),
        'torch state cut short': ([dict(good, torch=good['torch'][:10])],
                                  r'rng_state\[0\]\.torch is not'),
        'cuda states floats': ([dict(good, cuda=[torch.zeros(3)])],
                               r'rng_state\[0\]\.cuda is not'),
    }


@pytest.mark.parametrize('case', list(malformed_states()))
def test_malformed_rng_state_is_refused_naming_the_entry(case):
    from mmhgw.engine.hooks import RNGStateHook
    states, match = malformed_states()[case]

    class FakeRunner:
        iter = 3
        _load_from = '/runs/iter_3.pth'

    before = get_rng_state()
    with pytest.raises(ValueError, match=match) as err:
        RNGStateHook().after_load_checkpoint(
            FakeRunner, dict(meta=dict(iter=3), rng_state=states))
    assert '/runs/iter_3.pth' in str(err.value)
    # Checking put this process's generators back as they were.
    after = get_rng_state()
    assert after['python'] == before['python']
    assert torch.equal(after['torch'], before['torch'])
    assert torch.equal(after['numpy']['keys'], before['numpy']['keys'])


def test_other_thread_count_is_warned_about():
    from mmhgw.engine.hooks import RNGStateHook

    FakeRunner = fake_runner()
    state = get_rng_state()
    assert state['torch_threads'] == torch.get_num_threads()
    RNGStateHook().after_load_checkpoint(
        FakeRunner, dict(meta=dict(iter=3), rng_state=[state]))
    assert not FakeRunner.warnings
    state['torch_threads'] = torch.get_num_threads() + 1
    hook = RNGStateHook()
    hook.after_load_checkpoint(FakeRunner,
                               dict(meta=dict(iter=3), rng_state=[state]))
    assert f'written with {state["torch_threads"]} torch threads' in \
        FakeRunner.warnings[0]
    assert hook._pending is not None  # restored all the same
