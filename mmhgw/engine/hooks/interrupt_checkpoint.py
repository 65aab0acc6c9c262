"""A checkpoint when training is interrupted (Ctrl-C, a scheduler's
SIGTERM), so that ``--resume`` continues from there instead of from the
last periodic checkpoint."""
import os
import os.path as osp
import signal
import threading

from mmengine.dist import is_main_process
from mmengine.hooks import CheckpointHook, Hook
from mmengine.runner import EpochBasedTrainLoop

from mmhgw.engine.dist_utils import max_over_ranks
from mmhgw.registry import HOOKS

#: The signals that ask a run to stop: the terminal's Ctrl-C and what
#: cluster schedulers (Slurm, Kubernetes) send before they kill a job.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


@HOOKS.register_module()
class InterruptCheckpointHook(Hook):
    """Saves a checkpoint after the iteration in which SIGINT or SIGTERM
    arrived, then stops the run with exit status ``128 + signal`` (130 for
    Ctrl-C, 143 for SIGTERM), as a process killed by the signal reports.

    Without it an interrupted run loses every iteration since its last
    periodic checkpoint (2000 in mmseg's 20k schedule, a whole epoch in
    mmdet's). The first signal only sets a flag; the iteration in progress
    finishes, the checkpoint is written and ``last_checkpoint`` names it,
    so ``tools/train.py --resume`` (or ``resume=True``) continues from it.
    The signal's stock handler is back in place from its first arrival: a
    second Ctrl-C stops at once, as without the hook (during a long
    validation, say; the flag is read after training iterations only). The
    other stop signal, arriving after the first, asks for the same stop
    (torchrun passes a Ctrl-C on to its workers as SIGTERM). A signal the
    process was started to ignore (SIGINT of a job put in the background by
    a script, say) stays ignored.

    Iteration-based loops get the ``CheckpointHook``'s own file
    (``iter_{N}.pth``, counted in ``max_keep_ckpts``) and resume exactly
    where they stopped. Epoch-based loops can only resume at an epoch's
    start: the file ``epoch_{E}_iter_{N}.pth`` (interrupted in epoch E at
    iteration N, both counted from 1 as the log counts them) records E - 1
    epochs as complete, so the resumed run repeats epoch E from its start,
    with the iteration count (and iteration-based schedules such as
    warm-up) carried on. In distributed training the
    ranks agree on the flag (one scalar all-reduce per iteration), so they
    stop at the same iteration. Handlers can only be set in the main
    thread; elsewhere the hook does nothing.

    ``tools/train.py`` registers it for every run; a config may list it in
    ``custom_hooks`` instead.
    """
    priority = 'LOWEST'  # after the CheckpointHook's own save (VERY_LOW)

    def __init__(self):
        self.received = None  # the signal number, once one arrived
        self._previous = {}
        self._loop = None  # the train loop whose run the handlers serve

    def _handle(self, signum, frame):
        previous = self._previous.pop(signum, signal.SIG_DFL)
        signal.signal(signum, previous)  # the same signal again: stock
        if not self._training(frame):
            # Handlers left by a run that ended in an error (no after_train
            # then): the signal does what it did before the run.
            self._restore()
            _deliver(signum, previous, frame)
            return
        if self.received is not None:
            # The other stop signal: a launcher passing Ctrl-C on as
            # SIGTERM (torchrun) asks for the same stop.
            return
        self.received = signum
        print(
            f'{signal.Signals(signum).name} received: training stops '
            f'after this iteration, once its checkpoint is saved; send '
            f'it again to stop now', flush=True)

    def _training(self, frame) -> bool:
        """Whether the train loop's ``run`` is on the interrupted stack."""
        while frame is not None:
            if frame.f_code.co_name == 'run' and \
                    frame.f_locals.get('self') is self._loop:
                return True
            frame = frame.f_back
        return False

    def _restore(self):
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous = {}

    def before_train(self, runner):
        self.received = None
        self._restore()  # a previous run's, if it ended in an error
        if threading.current_thread() is not threading.main_thread():
            return
        self._loop = runner.train_loop
        for signum in STOP_SIGNALS:
            previous = signal.getsignal(signum)
            if previous is signal.SIG_IGN:
                # Started to ignore it (nohup, a background job of a
                # script): it must not stop the run now.
                continue
            self._previous[signum] = previous
            signal.signal(signum, self._handle)

    def after_train(self, runner):
        self._restore()

    def _agreed(self) -> int:
        """The signal any rank received (0: none)."""
        return int(max_over_ranks(self.received or 0))

    def after_train_iter(self, runner, batch_idx: int, data_batch=None,
                         outputs=None):
        signum = self._agreed()
        if not signum:
            return
        self._restore()
        path = self._save(runner)
        runner.logger.warning(
            f'{signal.Signals(signum).name}: stopped after iteration '
            f'{runner.iter + 1}; saved {path}. tools/train.py --resume '
            f'continues from it.')
        raise SystemExit(128 + signum)

    @staticmethod
    def _save(runner) -> str:
        """Writes the checkpoint of the state after this iteration and
        points ``last_checkpoint`` at it; returns its path."""
        saver = next(
            (h for h in runner.hooks if isinstance(h, CheckpointHook)), None)
        by_epoch = isinstance(runner.train_loop, EpochBasedTrainLoop)
        if saver is not None and not saver.by_epoch and not by_epoch:
            name = saver.filename_tmpl.format(runner.iter + 1)
            if saver.last_ckpt is None or \
                    osp.basename(saver.last_ckpt) != name:
                saver._save_checkpoint(runner)  # its own file and rotation
            return saver.last_ckpt
        out_dir = runner.work_dir if saver is None else saver.out_dir
        # Epoch and iteration counted from 1, as the log counts them.
        name = (f'epoch_{runner.epoch + 1}_iter_{runner.iter + 1}.pth'
                if by_epoch else f'iter_{runner.iter + 1}.pth')
        # by_epoch=False: the meta says `epoch` epochs are complete and
        # `iter + 1` iterations have run, which is what resume restores.
        runner.save_checkpoint(out_dir, name, by_epoch=False)
        path = osp.join(out_dir, name)
        if is_main_process():
            with open(osp.join(runner.work_dir, 'last_checkpoint'), 'w') as f:
                f.write(path)
        return path


def _deliver(signum, handler, frame):
    """Acts on ``signum`` as ``handler`` (a ``signal.getsignal`` value)
    would: calls it, ignores the signal, or (the default action) sends it
    again with the default handler in place."""
    if callable(handler):
        handler(signum, frame)
    elif handler in (signal.SIG_DFL, None):
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
