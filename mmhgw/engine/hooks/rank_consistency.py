"""Checks that distributed ranks end training with identical weights."""
import torch
from mmengine.dist import all_gather, get_world_size
from mmengine.hooks import Hook
from mmengine.logging import print_log
from mmengine.model import is_model_wrapper

from mmhgw.registry import HOOKS


@HOOKS.register_module()
class RankConsistencyHook(Hook):
    """After training, compares every rank's parameters and buffers.

    Data parallelism keeps replicas identical only if every rank applies the
    same updates; a layer that updates state outside autograd, or a
    non-deterministic reduction, would let them drift silently. Each rank
    reduces its state to a float64 fingerprint (sum and sum of squares per
    tensor); the fingerprints are gathered and compared. A mismatch raises,
    naming the first differing tensor; agreement is logged. Free in
    non-distributed runs (nothing to compare).

    Args:
        atol: tolerance on the fingerprints (0: bitwise-equal sums).
    """
    priority = 'VERY_LOW'

    def __init__(self, atol: float = 0.0):
        self.atol = atol

    def after_run(self, runner):
        world = get_world_size()
        if world < 2:
            return
        model = runner.model.module if is_model_wrapper(runner.model) \
            else runner.model
        names, prints = [], []
        for name, t in list(model.named_parameters()) + list(
                model.named_buffers()):
            if not t.is_floating_point():
                continue
            t = t.detach().double()
            names.append(name)
            prints.append(torch.stack([t.sum(), t.pow(2).sum()]))
        mine = torch.stack(prints)
        gathered = all_gather(mine)
        for rank, other in enumerate(gathered):
            diff = (other.to(mine.device) - mine).abs().amax(-1)
            bad = (diff > self.atol).nonzero()
            if len(bad):
                raise RuntimeError(
                    f'rank {rank} and this rank hold different '
                    f'{names[int(bad[0])]} after training '
                    f'(fingerprint difference {float(diff[bad[0]]):.3e})')
        print_log(f'parameters and buffers identical on {world} ranks '
                  f'({len(names)} tensors)', logger='current')
