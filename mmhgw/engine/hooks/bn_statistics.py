"""Batch-norm running statistics recomputed as exact averages under the
final weights."""
import logging
from typing import Callable, Iterable, List, Optional

import torch
from mmengine.dataset import DefaultSampler
from mmengine.dist import all_reduce
from mmengine.hooks import Hook
from mmengine.logging import print_log
from mmengine.model import is_model_wrapper
from torch.nn.modules.batchnorm import _BatchNorm
from torch.utils.data import DataLoader

from mmhgw.arg_checks import check_int
from mmhgw.engine.hooks.rng_state import get_rng_state, set_rng_state
from mmhgw.registry import HOOKS


def statistics_loader(train_loader: DataLoader, seed: int = 0) -> DataLoader:
    """A loader for :func:`recompute_bn_statistics` beside a built training
    loader ``train_loader``: its dataset (so its pipeline and augmentation),
    batch size and collate function, in a plain shuffled pass
    (``DefaultSampler``: this process's share under distributed runs)
    seeded by ``seed``, without worker processes (another set beside
    training's would hold a copy of the dataset each). Training's own
    iterator is left as it is."""
    batch_size = train_loader.batch_size or getattr(train_loader.batch_sampler,
                                                    'batch_size', 1)
    return DataLoader(
        train_loader.dataset, batch_size=batch_size,
        sampler=DefaultSampler(train_loader.dataset, shuffle=True, seed=seed),
        collate_fn=train_loader.collate_fn, num_workers=0)


def trained_bn_layers(model: torch.nn.Module) -> List[_BatchNorm]:
    """The BN layers of ``model`` that update running statistics in
    training: those in training mode once ``model.train()`` ran (backbones
    with ``norm_eval=True`` keep theirs frozen in eval mode) and that track
    running statistics at all."""
    model.train()
    return [
        m for m in model.modules()
        if isinstance(m, _BatchNorm) and m.training and m.track_running_stats
    ]


def forward_data_batch(model, batch) -> None:
    """One data batch, as a dataloader gives it, through an mmengine
    model's data preprocessor and its forward (``mode='tensor'``)."""
    data = model.data_preprocessor(batch, True)
    model(**data, mode='tensor')


@torch.no_grad()
def recompute_bn_statistics(model: torch.nn.Module, batches: Iterable,
                            num_batches: int,
                            forward: Callable = forward_data_batch) -> int:
    """Set every trained BN layer's running mean and variance to their plain
    averages over ``num_batches`` batches of ``batches`` under the model's
    current weights.

    Training leaves in each BN layer an exponential average (momentum 0.1)
    of its last ~20 batches' statistics, taken while the weights before it
    still moved. Where a layer's input statistics keep changing late in
    training, that average lags the final weights and evaluation normalises
    with statistics no training batch had. Here each batch goes through
    ``forward(model, batch)`` in training mode (by default an mmengine
    model's data preprocessor and ``mode='tensor'`` forward,
    :func:`forward_data_batch`), and each layer (``momentum=None``,
    PyTorch's cumulative average) averages the batch means and unbiased
    variances with equal weight. Under distributed training the averages of
    the processes are averaged. Layers the forward does not reach (an
    auxiliary head that only training's loss runs) keep their statistics,
    as all do when the recomputation fails. Nothing else changes: the
    training flags, momenta, ``num_batches_tracked`` and the random
    generators (dropout, augmentation) are restored, so a training run
    continues as it would have without the recomputation. ``batches`` is
    iterated again from its start when it has fewer than ``num_batches``.
    Returns the number of BN layers set.
    """
    check_int('num_batches', num_batches)
    if is_model_wrapper(model):
        model = model.module
    modes = {m: m.training for m in model.modules()}
    layers = trained_bn_layers(model)
    if not layers:
        for m, mode in modes.items():
            m.training = mode
        return 0
    kept = {
        m: (m.momentum, m.num_batches_tracked.clone(), m.running_mean.clone(),
            m.running_var.clone())
        for m in layers
    }
    generators = get_rng_state()
    unused = layers
    try:
        for m in layers:
            m.reset_running_stats()
            m.momentum = None
        done = 0
        while done < num_batches:
            seen = done
            for batch in batches:
                forward(model, batch)
                done += 1
                if done == num_batches:
                    break
            if done == seen:
                raise ValueError('the dataloader gave no batch to recompute '
                                 'the BN statistics from')
        unused = [m for m in layers if int(m.num_batches_tracked) == 0]
        for m in layers:
            all_reduce(m.running_mean, op='mean')
            all_reduce(m.running_var, op='mean')
    finally:
        for m, (momentum, tracked, mean, var) in kept.items():
            m.momentum = momentum
            m.num_batches_tracked.copy_(tracked)
            if m in unused:
                m.running_mean.copy_(mean)
                m.running_var.copy_(var)
        for m, mode in modes.items():
            m.training = mode
        set_rng_state(generators)
    return len(layers) - len(unused)


@HOOKS.register_module()
class RecomputeBNHook(Hook):
    """Recomputes the BN running statistics over training batches before
    the run's last checkpoint and validation (and every ``interval``
    iterations), with :func:`recompute_bn_statistics`.

    Runs after each chosen training iteration at priority ``LOW``: after
    the hooks that log the iteration (the capsule layers' terms among
    them), before ``CheckpointHook`` saves (``VERY_LOW``) and before the
    validation that follows the iteration. The batches come from the
    training set through the training pipeline, in a loader of their own
    (:func:`statistics_loader`, seeded by the run's seed): the training
    loop's own iterator and the random generators are untouched, so the
    training itself is that of a run without the hook. BN layers frozen in
    eval mode (``norm_eval=True``) keep their statistics.

    Unlike mmpretrain's ``PreciseBNHook`` it works with iteration-based
    loops and counts in iterations.

    Args:
        num_batches: training batches to average over.
        interval: also recompute every ``interval`` training iterations
            (match ``val_interval`` and the checkpoint interval to validate
            and save what was recomputed); ``None``: only after the last.
    """
    priority = 'LOW'

    def __init__(self, num_batches: int = 100, interval: Optional[int] = None):
        check_int('num_batches', num_batches)
        check_int('interval', interval, optional=True)
        self.num_batches = num_batches
        self.interval = interval
        self._loader = None

    def before_train(self, runner):
        self._loader = statistics_loader(runner.train_loop.dataloader,
                                         seed=runner.seed or 0)

    def after_train_iter(self, runner, batch_idx, data_batch=None,
                         outputs=None):
        if not (self.is_last_train_iter(runner) or
                (self.interval
                 and self.every_n_train_iters(runner, self.interval))):
            return
        count = recompute_bn_statistics(runner.model, self._loader,
                                        self.num_batches)
        if count == 0:
            print_log(
                'RecomputeBNHook: the model has no BN layer that trains '
                'its running statistics; nothing recomputed', logger='current',
                level=logging.WARNING)
