"""RankConsistencyHook compares fingerprints gathered from every rank."""
from types import SimpleNamespace

import pytest
import torch.nn as nn

from mmhgw.engine.hooks import rank_consistency
from mmhgw.engine.hooks.rank_consistency import RankConsistencyHook


def fake_world(monkeypatch, perturb_params=False, perturb_buffers=False):
    """Two ranks: this one, and a copy of it optionally nudged."""
    monkeypatch.setattr(rank_consistency, 'get_world_size', lambda: 2)
    calls = []

    def all_gather(mine):
        calls.append(mine)
        other = mine.clone()
        is_params = len(calls) == 1
        if (perturb_params and is_params) or (perturb_buffers
                                              and not is_params):
            other[0, 0] += 1e-3
        return [mine, other]

    monkeypatch.setattr(rank_consistency, 'all_gather', all_gather)


def runner():
    model = nn.Sequential(nn.Conv2d(2, 2, 1), nn.BatchNorm2d(2))
    return SimpleNamespace(model=model)


def test_identical_ranks_pass(monkeypatch):
    fake_world(monkeypatch)
    RankConsistencyHook().after_run(runner())


def test_differing_parameters_raise(monkeypatch):
    fake_world(monkeypatch, perturb_params=True)
    with pytest.raises(RuntimeError, match='different parameters.*0.weight'):
        RankConsistencyHook().after_run(runner())


def test_differing_buffers_are_reported_not_raised(monkeypatch):
    fake_world(monkeypatch, perturb_buffers=True)
    RankConsistencyHook().after_run(runner())


def test_single_process_is_a_no_op(monkeypatch):
    monkeypatch.setattr(rank_consistency, 'all_gather',
                        lambda t: pytest.fail('must not gather'))
    RankConsistencyHook().after_run(runner())
