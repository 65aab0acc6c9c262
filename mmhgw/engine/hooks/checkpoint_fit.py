"""Refusing a checkpoint that does not fit the model it is loaded into."""
import re
from collections.abc import Mapping
from typing import List, Optional, Sequence, Tuple

import torch
from mmengine.hooks import Hook
from mmengine.model import BaseTTAModel, is_model_wrapper

from mmhgw.registry import HOOKS

#: Keys named per kind in an error before "and N more".
MAX_NAMED = 5
#: What ``Runner.load_checkpoint`` strips from a checkpoint's keys.
REVISE_KEYS = ((r'^module\.', ''), )


class CheckpointMismatch(RuntimeError):
    """A checkpoint whose weights do not fit the model."""


def checkpoint_fit(
    model: torch.nn.Module, state_dict: Mapping,
    revise_keys: Sequence[Tuple[str, str]] = REVISE_KEYS
) -> Tuple[List[str], List[str], List[str]]:
    """How ``state_dict`` fits ``model``, key by key, as mmengine's loading
    would see it (``revise_keys`` applied to the checkpoint's keys).

    Returns:
        ``(missing, unexpected, mismatched)``: the model's parameters and
        buffers the checkpoint lacks (BN's ``num_batches_tracked`` aside,
        as mmengine ignores it), the checkpoint's keys the model lacks, and
        ``'key: checkpoint shape vs model shape'`` for the keys of both
        whose shapes differ.
    """
    revised = _revised(state_dict, revise_keys)
    own = model.state_dict()
    missing = [
        k for k in own
        if k not in revised and not k.endswith('num_batches_tracked')
    ]
    unexpected = [k for k in revised if k not in own]
    mismatched = [
        f'{k}: {tuple(revised[k].shape)} in the checkpoint vs '
        f'{tuple(own[k].shape)} in the model' for k in own if k in revised
        and torch.is_tensor(revised[k]) and revised[k].shape != own[k].shape
    ]
    return missing, unexpected, mismatched


def _revised(state_dict: Mapping, revise_keys=REVISE_KEYS) -> dict:
    revised = {}
    for key, value in state_dict.items():
        for pattern, replacement in revise_keys:
            key = re.sub(pattern, replacement, key)
        revised[key] = value
    return revised


def load_fitting_weights(model: torch.nn.Module, filename: str,
                         map_location='cpu'):
    """Load the weights of the checkpoint file ``filename`` into ``model``,
    for the tools that build a model themselves to score or inspect it;
    returns the checkpoint as read, for a tool that writes it back.

    A checkpoint that does not fit (:func:`checkpoint_fit`: weights missing,
    extra or of another shape, e.g. a config of another width than the
    run's) is refused with :class:`CheckpointMismatch` naming the file and
    the keys: mmengine's non-strict loading would keep the model's random
    weights where it skips, and every number taken from it would be that of
    a partly random network."""
    from mmhgw.engine.checkpoint import load_checkpoint_file
    checkpoint = load_checkpoint_file(filename, map_location=map_location)
    state = state_dict_of(checkpoint, filename)
    misfit = checkpoint_fit(model, state)
    if any(misfit):
        raise CheckpointMismatch(
            f'{filename} does not fit the model built from the config: '
            f'{describe_misfit(*misfit)}. Check that config and checkpoint '
            f'belong together (and the --cfg-options the run was trained '
            f'with).')
    # Checked above; not strict, since BN's num_batches_tracked may be
    # absent, as mmengine allows.
    model.load_state_dict(_revised(state), strict=False)
    return checkpoint


def state_dict_of(checkpoint, name: str) -> Mapping:
    """The weights of a loaded checkpoint (a Runner's ``state_dict`` entry,
    or the checkpoint itself); ``name`` names it in the error."""
    state = checkpoint.get('state_dict', checkpoint) \
        if isinstance(checkpoint, Mapping) else None
    if not isinstance(state, Mapping):
        raise CheckpointMismatch(
            f'{name} holds no state dict (a mapping of weights), got '
            f'{type(state).__name__}')
    return state


def describe_misfit(missing, unexpected, mismatched) -> str:
    """The keys of :func:`checkpoint_fit`, a few of each kind."""
    parts = []
    for what, keys in (('model weights it does not hold',
                        missing), ('keys the model does not have', unexpected),
                       ('weights of another shape', mismatched)):
        if keys:
            shown = '; '.join(keys[:MAX_NAMED])
            if len(keys) > MAX_NAMED:
                shown += f'; and {len(keys) - MAX_NAMED} more'
            parts.append(f'{len(keys)} {what} ({shown})')
    return ', '.join(parts)


@HOOKS.register_module()
class CheckpointFitHook(Hook):
    """Refuses a loaded checkpoint whose weights do not fit the model, before
    anything of it is applied.

    mmengine loads a checkpoint non-strictly: keys the model lacks, weights
    it leaves out and weights of another shape are logged and skipped. For
    fine-tuning that is wanted; evaluating such a model prints metrics of a
    partly random network, and resuming one continues a run whose
    optimizer state belongs to other parameters (it fails later, inside the
    optimizer). This hook, put first (``VERY_HIGH``), checks the checkpoint
    in ``after_load_checkpoint``, which mmengine calls after reading the
    file and before loading the model, the optimizer or the schedulers.

    Args:
        checkpoint: the checkpoint's path or name, for the message.
        purpose: ``'test'`` or ``'resume'``: what the message advises;
            resuming needs an exact fit.
        allow_partial: with ``'test'``, log the misfit as a warning and go
            on.
    """
    priority = 'VERY_HIGH'

    def __init__(self, checkpoint: Optional[str] = None, purpose: str = 'test',
                 allow_partial: bool = False):
        if purpose not in ('test', 'resume'):
            raise ValueError(f"purpose must be 'test' or 'resume', got "
                             f'{purpose!r}')
        self.checkpoint = checkpoint
        self.allow_partial = allow_partial
        self.purpose = purpose

    def after_load_checkpoint(self, runner, checkpoint: dict):
        name = self.checkpoint or 'the checkpoint being loaded'
        state = state_dict_of(checkpoint, name)
        # The model the weights go into, unwrapped as mmengine's
        # load_state_dict unwraps it (DDP-like wrappers, test-time
        # augmentation).
        model = runner.model
        while is_model_wrapper(model) or isinstance(model, BaseTTAModel):
            model = model.module
        misfit = checkpoint_fit(model, state)
        if not any(misfit):
            return
        what = describe_misfit(*misfit)
        if self.purpose == 'resume':
            raise CheckpointMismatch(
                f'cannot resume from {name}: it does not fit the model of '
                f'this config: {what}. A run resumes with the model and '
                f'optimizer that wrote the checkpoint; to start a changed '
                f'model from these weights, train with load_from='
                f'{self.checkpoint or "CHECKPOINT"} instead of --resume.')
        if self.allow_partial:
            runner.logger.warning(
                f'{name} fits the model only partly (--allow-partial): '
                f'{what}')
            return
        raise CheckpointMismatch(
            f'{name} does not fit the model of this config: {what}. The '
            f'weights left out would stay randomly initialised and the '
            f'metrics would be those of a partly random model. Check that '
            f'config and checkpoint belong together (--allow-partial '
            f'evaluates anyway).')
