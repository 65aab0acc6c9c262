"""BN running statistics recomputed as exact averages under the final
weights (recompute_bn_statistics, RecomputeBNHook)."""
import copy
import os.path as osp
import random

import numpy as np
import pytest
import torch
import torch.nn as nn
from mmengine.model import BaseModel
from mmengine.runner import Runner
from torch.utils.data import Dataset

import mmhgw  # noqa: F401
from mmhgw.engine import RecomputeBNHook, recompute_bn_statistics
from mmhgw.engine.hooks.bn_statistics import statistics_loader


class Net(BaseModel):
    """Two trained BN layers with dropout between them, one that its
    ``train()`` keeps frozen in eval mode (as ``norm_eval=True`` does) and
    one that only the loss reaches (as an auxiliary head)."""

    def __init__(self):
        super().__init__()
        self.frozen = nn.BatchNorm2d(2)
        self.conv = nn.Conv2d(2, 4, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(4)
        self.drop = nn.Dropout(0.5)
        self.bn2 = nn.BatchNorm2d(4)
        self.aux = nn.BatchNorm2d(4)
        with torch.no_grad():
            self.frozen.running_mean.fill_(0.5)
            self.aux.running_var.fill_(2.0)

    def train(self, mode=True):
        super().train(mode)
        self.frozen.eval()
        return self

    def forward(self, x, y=None, mode='tensor'):
        out = self.bn2(self.drop(self.bn1(self.conv(self.frozen(x)))))
        if mode == 'loss':
            out = self.aux(out)
            return dict(loss=((out.mean((1, 2, 3)) - y)**2).mean())
        return out


class Data(Dataset):
    """Random scaling drawn from numpy's generator, as an augmentation."""

    def __len__(self):
        return 12

    def __getitem__(self, i):
        x = torch.randn(2, 5, 5, generator=torch.Generator().manual_seed(i))
        x = x * (1 + np.random.rand()) + i
        return dict(x=x.float(), y=torch.tensor(float(i % 3)))


def batches(count):
    g = torch.Generator().manual_seed(7)
    return [
        dict(x=torch.randn(4, 2, 5, 5, generator=g) * (k + 1) + k)
        for k in range(count)
    ]


def averaged_input_statistics(model, data, layers):
    """The oracle: each BN layer's input in a training-mode forward of each
    batch, the mean over batches of its per-channel mean and unbiased
    variance."""
    model = copy.deepcopy(model).train()
    seen = {name: [] for name in layers}
    hooks = [
        getattr(model, name).register_forward_pre_hook(
            lambda m, args, name=name: seen[name].append(args[0]))
        for name in layers
    ]
    with torch.no_grad():
        for batch in data:
            model(**batch, mode='tensor')
    for h in hooks:
        h.remove()
    return {
        name: (torch.stack([t.mean((0, 2, 3)) for t in inputs]).mean(0),
               torch.stack([
                   t.transpose(0, 1).flatten(1).var(1, unbiased=True)
                   for t in inputs
               ]).mean(0))
        for name, inputs in seen.items()
    }


@pytest.mark.parametrize('num_batches', [3, 5])
def test_statistics_are_the_batch_averages_under_the_weights(num_batches):
    torch.manual_seed(0)
    model = Net()
    data = batches(3)
    used = (data * 2)[:num_batches]  # more batches than given: again
    state = torch.get_rng_state()
    expected = averaged_input_statistics(model, used, ['bn1', 'bn2'])
    torch.set_rng_state(state)  # the same dropout masks
    assert recompute_bn_statistics(model, data, num_batches) == 2
    for name, (mean, var) in expected.items():
        bn = getattr(model, name)
        torch.testing.assert_close(bn.running_mean, mean)
        torch.testing.assert_close(bn.running_var, var)


def test_plain_modules_through_their_own_forward():
    model = nn.Sequential(nn.Conv2d(2, 3, 1), nn.BatchNorm2d(3))
    data = [b['x'] for b in batches(3)]
    inputs = [model[0](x).detach() for x in data]

    def forward(m, x):
        assert not torch.is_grad_enabled()
        m(x)

    assert recompute_bn_statistics(model, data, 3, forward=forward) == 1
    torch.testing.assert_close(
        model[1].running_mean,
        torch.stack([t.mean((0, 2, 3)) for t in inputs]).mean(0))


def test_only_the_running_statistics_change():
    torch.manual_seed(0)
    model = Net().eval()
    before = copy.deepcopy(model.state_dict())
    random.seed(1), np.random.seed(1), torch.manual_seed(1)
    expected = (random.random(), np.random.rand(), torch.rand(2))
    random.seed(1), np.random.seed(1), torch.manual_seed(1)
    recompute_bn_statistics(model, batches(2), 2)
    assert (random.random(), np.random.rand()) == expected[:2]
    assert torch.equal(torch.rand(2), expected[2])
    assert not any(m.training for m in model.modules())
    assert model.bn1.momentum == model.bn2.momentum == 0.1
    after = model.state_dict()
    changed = {k for k in before if not torch.equal(before[k], after[k])}
    assert changed == {
        f'{bn}.running_{s}'
        for bn in ('bn1', 'bn2')
        for s in ('mean', 'var')
    }


def test_a_failure_leaves_the_statistics_as_they_were():

    def failing():
        yield from batches(1)
        raise RuntimeError('data gone')

    model = Net()
    before = copy.deepcopy(model.state_dict())
    with pytest.raises(RuntimeError, match='data gone'):
        recompute_bn_statistics(model, failing(), 3)
    for key, value in model.state_dict().items():
        assert torch.equal(value, before[key]), key
    assert model.bn1.momentum == 0.1


def test_bad_arguments_and_models_without_trained_bn():
    with pytest.raises(ValueError, match='num_batches must be an int >= 1'):
        recompute_bn_statistics(Net(), batches(1), 0)
    with pytest.raises(ValueError, match='gave no batch'):
        recompute_bn_statistics(Net(), [], 2)

    class NoBN(BaseModel):

        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(2, 2)

        def forward(self, x, mode='tensor'):
            return self.lin(x)

    model = NoBN().eval()
    assert recompute_bn_statistics(model, [dict(x=torch.ones(1, 2))], 1) == 0
    assert not model.training
    for kwargs, match in [(dict(num_batches=0), 'num_batches'),
                          (dict(num_batches=2.5), 'num_batches'),
                          (dict(num_batches=True), 'num_batches'),
                          (dict(interval=True), 'interval'),
                          (dict(interval=0), 'interval')]:
        with pytest.raises(ValueError, match=match):
            RecomputeBNHook(**kwargs)


def make_runner(work_dir, hooks):
    torch.manual_seed(0)
    return Runner(
        model=Net(), work_dir=str(work_dir), train_dataloader=dict(
            dataset=Data(), sampler=dict(type='InfiniteSampler', shuffle=True,
                                         seed=0), batch_size=4,
            collate_fn=dict(type='default_collate')),
        optim_wrapper=dict(optimizer=dict(type='SGD', lr=0.1)),
        train_cfg=dict(by_epoch=False,
                       max_iters=6), default_hooks=dict(checkpoint=dict(
                           type='CheckpointHook', interval=3, by_epoch=False)),
        custom_hooks=hooks, randomness=dict(seed=0),
        experiment_name=osp.basename(work_dir))


def test_hook_leaves_training_alone_and_saves_recomputed_statistics(tmp_path):
    plain = make_runner(tmp_path / 'plain', [])
    plain.train()
    runner = make_runner(tmp_path / 'hook',
                         [dict(type='RecomputeBNHook', num_batches=2)])
    names = [type(h).__name__ for h in runner.hooks]
    assert names.index('RecomputeBNHook') < names.index('CheckpointHook')
    runner.train()
    trained, reference = runner.model, plain.model
    for (name, p), (_, q) in zip(trained.named_parameters(),
                                 reference.named_parameters()):
        assert torch.equal(p, q), name
    assert not torch.equal(trained.bn2.running_var, reference.bn2.running_var)
    # The plain run's weights, recomputed alike, give the hook's statistics.
    recompute_bn_statistics(reference,
                            statistics_loader(plain.train_dataloader, seed=0),
                            2)
    saved = torch.load(tmp_path / 'hook' / 'iter_6.pth',
                       weights_only=False)['state_dict']
    for key, value in reference.state_dict().items():
        torch.testing.assert_close(trained.state_dict()[key], value)
        torch.testing.assert_close(saved[key], value)
    # Without an interval only the last iteration recomputes.
    hook3, plain3 = (torch.load(tmp_path / run / 'iter_3.pth',
                                weights_only=False)['state_dict']
                     for run in ('hook', 'plain'))
    for key, value in plain3.items():
        assert torch.equal(hook3[key], value), key


def test_interval_recomputes_before_each_of_its_checkpoints(tmp_path):
    plain = make_runner(tmp_path / 'plain', [])
    plain.train()
    runner = make_runner(
        tmp_path / 'every3',
        [dict(type='RecomputeBNHook', num_batches=2, interval=3)])
    runner.train()
    every3, plain3 = (torch.load(tmp_path / run / 'iter_3.pth',
                                 weights_only=False)['state_dict']
                      for run in ('every3', 'plain'))
    changed = {k for k, v in plain3.items() if not torch.equal(every3[k], v)}
    assert changed == {
        f'{bn}.running_{s}'
        for bn in ('bn1', 'bn2')
        for s in ('mean', 'var')
    }
