"""Random number generator states in checkpoints, for exact resumption."""
import functools
import random
from typing import Callable, Optional

import numpy as np
import torch
from mmengine.dist import all_gather_object, get_rank, get_world_size
from mmengine.hooks import Hook
from mmengine.runner.base_loop import BaseLoop

from mmhgw.registry import HOOKS

#: Checkpoint key of the states, one entry per rank.
CHECKPOINT_KEY = 'rng_state'


def get_rng_state() -> dict:
    """This process's python, numpy, torch (and CUDA) generator states, as
    plain values and tensors that load under ``weights_only=True``, and its
    number of torch threads (``torch_threads``: CPU reductions split their
    sums by thread, so results are bit-identical only at the same count)."""
    kind, keys, pos, has_gauss, gauss = np.random.get_state()
    state = dict(
        python=random.getstate(),
        numpy=dict(kind=str(kind),
                   keys=torch.from_numpy(keys.astype(np.int64)), pos=int(pos),
                   has_gauss=int(has_gauss), cached_gaussian=float(gauss)),
        torch=torch.get_rng_state(), torch_threads=torch.get_num_threads())
    # Only when CUDA is in use: querying it would initialise it.
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state['cuda'] = torch.cuda.get_rng_state_all()
    return state


def _set_python(state):
    version, internal, gauss = state
    random.setstate((version, tuple(internal), gauss))


def _set_numpy(state):
    np.random.set_state(
        (state['kind'], state['keys'].cpu().numpy().astype(np.uint32),
         state['pos'], state['has_gauss'], state['cached_gaussian']))


def _set_torch(state):
    torch.set_rng_state(state.cpu())


def _set_cuda(state, apply: bool = True):
    if not isinstance(state, (list, tuple)) or not all(
            torch.is_tensor(s) and s.dtype == torch.uint8 for s in state):
        raise TypeError('expected a list of uint8 tensors, one per device')
    if apply and torch.cuda.is_available():
        cuda = [s.cpu() for s in state]
        torch.cuda.set_rng_state_all(cuda[:torch.cuda.device_count()])


#: Each generator's entry in a state, and how it is set.
_SETTERS = (('python', _set_python), ('numpy', _set_numpy),
            ('torch', _set_torch), ('cuda', _set_cuda))


def set_rng_state(state: dict, name: str = CHECKPOINT_KEY,
                  set_cuda: bool = True):
    """Restore what :func:`get_rng_state` returned (tensors may come back
    on a GPU through ``map_location``; generators take CPU tensors).

    A malformed state raises ``ValueError`` naming its entry
    (``name.numpy`` and so on) and what is wrong with it. ``set_cuda=False``
    only checks the CUDA states' form (setting them before CUDA is
    initialised would be queued, and not undone by a later restore).
    """
    if not isinstance(state, dict):
        raise ValueError(f'{name} must be a dict of generator states, got '
                         f'{type(state).__name__}')
    for part, setter in _SETTERS:
        if part not in state:
            if part == 'cuda':
                continue
            raise ValueError(f'{name} lacks the {part!r} generator state')
        try:
            if part == 'cuda':
                setter(state[part], apply=set_cuda)
            else:
                setter(state[part])
        except Exception as err:  # noqa: BLE001  (any malformed value)
            raise ValueError(
                f'{name}.{part} is not a {part} generator state as '
                f'{CHECKPOINT_KEY} stores it ({type(err).__name__}: {err})'
            ) from err


def check_rng_states(states, world_size: int):
    """Refuse a checkpoint's ``rng_state`` that cannot be restored, naming
    the entry, before anything of the checkpoint is applied: each rank's
    state is set once and this process's own state put back."""
    if not isinstance(states, (list, tuple)):
        raise ValueError(f'{CHECKPOINT_KEY} must be a list of per-rank '
                         f'states, got {type(states).__name__}')
    if len(states) != world_size:
        return  # not restored (a warning says so)
    current = get_rng_state()
    try:
        for rank, state in enumerate(states):
            set_rng_state(state, f'{CHECKPOINT_KEY}[{rank}]', set_cuda=False)
    finally:
        set_rng_state(current, set_cuda=False)


def reseed_train_data(loop, seed: int) -> bool:
    """Give ``loop``'s sampler and dataloader workers ``seed``, the seed of
    the run being resumed (mmengine built them with this run's seed, a new
    random one when the config sets none, before the checkpoint was read);
    returns whether anything changed."""
    loader = loop.dataloader
    sampler = getattr(loader, 'sampler', None)
    if seed is None or getattr(sampler, 'seed', seed) == seed:
        return False
    sampler.seed = seed
    if hasattr(sampler, '_indices_of_rank'):  # InfiniteSampler
        sampler.indices = sampler._indices_of_rank()
    init_fn = loader.worker_init_fn
    if isinstance(init_fn, functools.partial) and 'seed' in init_fn.keywords:
        loader.worker_init_fn = functools.partial(
            init_fn.func, *init_fn.args, **dict(init_fn.keywords, seed=seed))
    old = getattr(loop, 'dataloader_iterator', None)
    if old is not None:
        # Iteration-based loops made their iterator (workers may already
        # have fetched indices) at construction: make it anew.
        inner = getattr(old, '_iterator', None)
        if hasattr(inner, '_shutdown_workers'):
            inner._shutdown_workers()
        loader._iterator = None  # persistent workers would be reused
        loop.dataloader_iterator = type(old)(loader)
    return True


class _RestoreBeforeNextBatch:
    """Wraps an iteration-based loop's dataloader iterator: lets ``skip``
    batches through, then calls ``restore`` just before the next batch is
    drawn (its random augmentation included) and unwraps itself."""

    def __init__(self, loop, skip: int, restore: Callable[[], None]):
        inner = loop.dataloader_iterator
        if isinstance(inner, _RestoreBeforeNextBatch):
            inner = inner.inner
        self.loop, self.inner, self.skip, self.restore = (loop, inner, skip,
                                                          restore)
        loop.dataloader_iterator = self

    def __iter__(self):
        return self

    def __next__(self):
        if self.skip > 0:
            self.skip -= 1
        else:
            self.loop.dataloader_iterator = self.inner
            self.restore()
        return next(self.inner)

    def __getattr__(self, name):
        return getattr(self.inner, name)


@HOOKS.register_module()
class RNGStateHook(Hook):
    """Saves the random generators' states in checkpoints and restores them
    on resume, so that a resumed run continues exactly as the uninterrupted
    one would have, dropout and random augmentation included.

    mmengine seeds the generators once at start and its samplers resume by
    iteration, but the generators' states are not saved: a resumed run
    draws other dropout masks and augmentations than the uninterrupted run.
    This hook writes the python ``random``, numpy and torch (CPU, and CUDA
    when in use) states of every rank into ``checkpoint['rng_state']``
    (plain values and tensors: they load under ``weights_only=True``) and,
    on resume, sets them at the point where they were saved: just before
    the next training batch is drawn. For iteration-based loops that is
    after mmengine has re-read the batches already trained (which runs
    their random augmentation again); for epoch-based loops, at the start
    of the next epoch.

    The state stored is that of the end of the iteration (or epoch) whose
    checkpoint it is; what runs between the save and the next batch
    (validation draws from the generators) is undone in the uninterrupted
    run too, by restoring the saved state there as well, so both runs draw
    the next batch from the same state. All checkpoints of one iteration
    (the periodic one and a ``save_best`` one after validation) hold the
    same state. Dataloader workers need no state: mmengine seeds them from
    the run's seed, and they replay the skipped batches. The training
    sampler and the workers get the seed of the run being resumed (mmengine
    builds them with the new run's seed, a random one when the config sets
    none, before the checkpoint is read). A checkpoint from a run with
    another number of processes is resumed without restoring the states (a
    warning says so).
    """
    priority = 'NORMAL'

    def __init__(self):
        self._pending: Optional[tuple] = None  # (iter, seed, states)
        self._pinned: Optional[tuple] = None  # (iter, [states per rank])
        self._epoch_restore: Optional[dict] = None

    @staticmethod
    def _training_loop(runner):
        loop = getattr(runner, '_train_loop', None)
        return loop if isinstance(loop, BaseLoop) else None

    def before_save_checkpoint(self, runner, checkpoint: dict):
        it = (checkpoint.get('meta') or {}).get('iter', runner.iter)
        if self._pinned is None or self._pinned[0] != it:
            self._pinned = (it, all_gather_object(get_rng_state()))
            self._schedule(runner, self._pinned[1], skip=0)
        checkpoint[CHECKPOINT_KEY] = self._pinned[1]

    def after_load_checkpoint(self, runner, checkpoint: dict):
        states = checkpoint.get(CHECKPOINT_KEY)
        self._pending = None
        if states is None:
            return
        try:
            check_rng_states(states, get_world_size())
        except ValueError as err:
            raise ValueError(
                f'{type(self).__name__}: cannot restore the random states '
                f'of {getattr(runner, "_load_from", None) or "the checkpoint"}'
                f': {err}. The checkpoint was not written by this hook (or '
                f'was altered); resume from another one, or remove its '
                f'{CHECKPOINT_KEY!r} entry to resume without them.') from err
        if len(states) != get_world_size():
            runner.logger.warning(
                f'{type(self).__name__}: the checkpoint holds the random '
                f'states of {len(states)} processes, this run has '
                f'{get_world_size()}; they are not restored, so the resumed '
                f'run is not exactly the uninterrupted one')
            return
        threads = states[get_rank()].get('torch_threads')
        if isinstance(threads, int) and threads != torch.get_num_threads():
            runner.logger.warning(
                f'{type(self).__name__}: the checkpoint was written with '
                f'{threads} torch threads, this run uses '
                f'{torch.get_num_threads()}. CPU reductions split their sums '
                f'by thread, so the resumed run follows the uninterrupted '
                f'one to rounding (about 1e-7 relative), not bit for bit; '
                f'set OMP_NUM_THREADS={threads} for an exact continuation.')
        meta = checkpoint.get('meta') or {}
        self._pending = (meta.get('iter'), meta.get('seed'), states)

    def before_train_epoch(self, runner):
        if self._pending is not None:
            it, seed, states = self._pending
            self._pending = None
            # Only when resuming (load_from alone starts at iteration 0).
            loop = self._training_loop(runner)
            if loop is not None and it is not None and it == runner.iter \
                    and it > 0:
                if reseed_train_data(loop, seed):
                    runner.logger.info(
                        f'{type(self).__name__}: training data sampled '
                        f'with the resumed run\'s seed {seed}')
                self._pinned = (it, states)
                self._schedule(runner, states, skip=runner.iter)
        if self._epoch_restore is not None:
            set_rng_state(self._epoch_restore)
            self._epoch_restore = None

    def before_train_iter(self, runner, batch_idx: int, data_batch=None):
        # An epoch-based loop's state saved within an epoch is not the
        # state at the start of the next one.
        self._epoch_restore = None

    def _schedule(self, runner, states, skip: int):
        loop = self._training_loop(runner)
        if loop is None:
            return
        state = states[get_rank()]
        if hasattr(loop, 'dataloader_iterator'):
            # Iteration-based: the batches of an epoch are drawn by one
            # iterator; restore right before the next draw.
            _RestoreBeforeNextBatch(loop, skip, lambda: set_rng_state(state))
        else:
            self._epoch_restore = state
