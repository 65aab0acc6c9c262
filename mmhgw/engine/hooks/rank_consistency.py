"""Checks that distributed ranks end training with identical weights."""
import torch
from mmengine.dist import all_gather, get_world_size
from mmengine.hooks import Hook
from mmengine.logging import print_log
from mmengine.model import is_model_wrapper

from mmhgw.registry import HOOKS


@HOOKS.register_module()
class RankConsistencyHook(Hook):
    """After training, compares every rank's parameters (and buffers).

    Data parallelism keeps replicas identical only if every rank applies the
    same updates; a layer that updates parameters outside autograd, or a
    non-deterministic reduction, would let them drift silently. Each rank
    reduces each tensor to a float64 fingerprint (sum and sum of squares);
    the fingerprints are gathered and compared. Differing parameters raise,
    naming the first one; agreement is logged. Differing buffers are only
    reported: DDP broadcasts rank 0's buffers at the start of each forward,
    so after the last step each rank's BN running statistics reflect its
    own last batch (rank 0's are the ones checkpointed). Free in
    non-distributed runs (nothing to compare).

    Args:
        atol: tolerance on the fingerprints (0: bitwise-equal sums).
    """
    priority = 'VERY_LOW'

    def __init__(self, atol: float = 0.0):
        self.atol = atol

    def _mismatches(self, named_tensors):
        names, prints = [], []
        for name, t in named_tensors:
            if t.is_floating_point():
                t = t.detach().double()
                names.append(name)
                prints.append(torch.stack([t.sum(), t.pow(2).sum()]))
        if not names:
            return [], 0
        mine = torch.stack(prints)
        bad = set()
        for other in all_gather(mine):
            diff = (other.to(mine.device) - mine).abs().amax(-1)
            bad.update(int(i) for i in (diff > self.atol).nonzero())
        return [names[i] for i in sorted(bad)], len(names)

    def after_run(self, runner):
        world = get_world_size()
        if world < 2:
            return
        model = runner.model.module if is_model_wrapper(runner.model) \
            else runner.model
        params, n_params = self._mismatches(model.named_parameters())
        if params:
            raise RuntimeError(
                f'ranks hold different parameters after training: '
                f'{", ".join(params[:5])} ({len(params)} in all)')
        buffers, _ = self._mismatches(model.named_buffers())
        print_log(
            f'parameters identical on {world} ranks ({n_params} '
            f'tensors)', logger='current')
        if buffers:
            print_log(
                f'{len(buffers)} buffers differ across ranks (e.g. '
                f'{buffers[0]}): DDP syncs buffers before each forward, so '
                f'running statistics end on each rank\'s last batch; rank '
                f'0\'s are checkpointed', logger='current', level=30)
