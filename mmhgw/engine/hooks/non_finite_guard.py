"""Stopping a diverged run before it writes a non-finite checkpoint."""
from typing import Dict, Iterable, List, Tuple

import torch
from mmengine.hooks import Hook
from mmengine.model import is_model_wrapper

from mmhgw.arg_checks import check_int
from mmhgw.engine.dist_utils import max_over_ranks
from mmhgw.registry import HOOKS

#: Non-finite names listed in an error before "and N more".
MAX_NAMED = 5


def non_finite_tensors(named: Iterable[Tuple[str, object]]) -> List[str]:
    """Names of the floating-point tensors among ``named`` that hold a NaN
    or an infinity (one device synchronisation for all of them)."""
    names, flags = [], []
    for name, value in named:
        if torch.is_tensor(value) and value.is_floating_point():
            names.append(name)
            flags.append(torch.isfinite(value).all())
    if not flags:
        return []
    finite = torch.stack([f.to(flags[0].device) for f in flags]).cpu()
    return [n for n, ok in zip(names, finite.tolist()) if not ok]


def nested_tensors(obj, prefix: str = ''):
    """``(dotted name, tensor)`` of every tensor in nested dicts / lists."""
    if torch.is_tensor(obj):
        yield prefix, obj
    elif isinstance(obj, dict):
        for key, value in obj.items():
            yield from nested_tensors(
                value, f'{prefix}.{key}' if prefix else str(key))
    elif isinstance(obj, (list, tuple)):
        for i, value in enumerate(obj):
            yield from nested_tensors(value,
                                      f'{prefix}.{i}' if prefix else str(i))


def _listing(names: List[str]) -> str:
    shown = ', '.join(names[:MAX_NAMED])
    if len(names) > MAX_NAMED:
        shown += f' and {len(names) - MAX_NAMED} more'
    return shown


@HOOKS.register_module()
class NonFiniteGuardHook(Hook):
    """Stops training when the loss or the weights stop being finite.

    Without it a diverged run (a too high learning rate, say) trains on in
    NaN, exits 0, and its NaN checkpoint becomes ``last_checkpoint``, which
    ``--resume`` then loads. With it the run raises a ``RuntimeError`` that
    names the iteration and what went non-finite, so the process exits
    non-zero, and no checkpoint of the non-finite state is written: the
    last checkpoint on disk stays a finite one.

    Checks: the loss terms of every iteration (the ``loss*`` entries of the
    model's log variables, already on the host for the log); parameters and
    buffers every ``param_interval`` iterations; the whole checkpoint
    (weights and optimizer state) before it is saved; and the weights of a
    checkpoint when one is loaded. Its priority (``ABOVE_NORMAL``) puts the
    check after an iteration before the ``CheckpointHook`` (``VERY_LOW``)
    and before hooks that would carry the state on (EMA, ``NORMAL``). In
    distributed training the ranks agree on the loss check (one scalar
    all-reduce per iteration), so they stop together.

    Args:
        check_loss: check the loss terms after every iteration.
        param_interval: check parameters and buffers every this many
            iterations; 0 only before a checkpoint is saved.
        check_loaded: refuse a loaded checkpoint with non-finite weights.
    """
    priority = 'ABOVE_NORMAL'

    def __init__(self, check_loss: bool = True, param_interval: int = 100,
                 check_loaded: bool = True):
        check_int('param_interval', param_interval, 0)
        self.check_loss = check_loss
        self.param_interval = param_interval
        self.check_loaded = check_loaded

    @staticmethod
    def _where(runner) -> str:
        # Iterations are counted from 1, as the Runner's log does.
        where = f'iteration {runner.iter + 1}'
        if runner.max_epochs is not None and runner.max_epochs > 1:
            where += f' (epoch {runner.epoch + 1})'
        return where

    @staticmethod
    def _stop(message: str):
        raise RuntimeError(
            f'{message}. Training stopped; no checkpoint of this state was '
            f'written, the last one saved is finite. Lower the learning '
            f'rate or clip gradients (optim_wrapper.clip_grad).')

    def _agree(self, bad: bool) -> bool:
        """Whether any rank saw a non-finite value."""
        return max_over_ranks(float(bad)) > 0

    def after_train_iter(self, runner, batch_idx: int, data_batch=None,
                         outputs=None):
        if self.check_loss:
            losses: Dict[str, object] = {
                k: v
                for k, v in (outputs or {}).items() if 'loss' in k
            }
            bad = non_finite_tensors(
                (k, torch.as_tensor(v, dtype=torch.float64))
                for k, v in losses.items())
            if self._agree(bool(bad)):
                values = ', '.join(f'{k}={float(losses[k]):.4g}' for k in bad)
                self._stop(f'non-finite loss at {self._where(runner)}: '
                           f'{values or "on another rank"}')
        if self.param_interval and \
                (runner.iter + 1) % self.param_interval == 0:
            self._check_model(runner)

    def _check_model(self, runner):
        model = runner.model
        if is_model_wrapper(model):
            model = model.module
        bad = non_finite_tensors(
            list(model.named_parameters()) + list(model.named_buffers()))
        if bad:
            self._stop(f'non-finite weights after {self._where(runner)}: '
                       f'{_listing(bad)}')

    def before_save_checkpoint(self, runner, checkpoint: dict):
        for part in ('state_dict', 'optimizer'):
            bad = non_finite_tensors(nested_tensors(checkpoint.get(part)))
            if bad:
                self._stop(f'non-finite {part} entries at '
                           f'{self._where(runner)}, refusing to save the '
                           f'checkpoint: {_listing(bad)}')

    def after_load_checkpoint(self, runner, checkpoint: dict):
        if not self.check_loaded:
            return
        bad = non_finite_tensors(nested_tensors(checkpoint.get('state_dict')))
        if bad:
            meta = checkpoint.get('meta') or {}
            raise RuntimeError(
                f'the checkpoint being loaded (iteration {meta.get("iter")}, '
                f'epoch {meta.get("epoch")}) holds non-finite weights: '
                f'{_listing(bad)}; it was written by a diverged run. Resume '
                f'from an earlier checkpoint.')
