"""Work-dir safety for training: one live run per work dir, and ``--resume``
that either finds the checkpoint to continue from or refuses to start.

The rules (the train tool applies them through :func:`claim_work_dir`):

* A lock file, ``<work_dir>/train.lock``, is held by a live run (an
  exclusive ``flock``, which the operating system drops when the process
  ends, however it ends). A second run into the same work dir refuses to
  start, naming the process that holds it. A lock left by a dead process
  holds nothing and is taken over. In a distributed launch only the
  process of global rank 0 takes it: one lock per run.
* Resuming without a path reads ``<work_dir>/last_checkpoint``. A missing
  or empty file, or one naming no existing checkpoint, stops the run with
  an error that names what was looked for and the checkpoints the work dir
  holds; ``start_fresh`` (the tool's ``--start-fresh``) allows a run from
  scratch instead.
* ``last_checkpoint`` stores an absolute path. A checkpoint of that name in
  this work dir is preferred to it, so that a copied or moved work dir
  resumes from its own files, not from the original's; the stored path is
  used when this work dir has no such file (mmengine's ``CheckpointHook``
  may save to an ``out_dir`` elsewhere).
"""
import atexit
import errno
import fcntl
import glob
import json
import os
import os.path as osp
import socket
import time
from typing import List, Optional

#: Name of the lock file in the work dir.
LOCK_NAME = 'train.lock'
#: The file in which mmengine's CheckpointHook names the latest checkpoint.
LAST_CHECKPOINT = 'last_checkpoint'

# Environment variables holding the global rank, per launcher (those
# mmengine's init_dist reads).
_RANK_VARIABLES = {
    'pytorch': ('RANK', ),
    'slurm': ('SLURM_PROCID', ),
    'mpi': ('OMPI_COMM_WORLD_RANK', 'PMI_RANK'),
}


class WorkDirError(RuntimeError):
    """The work dir cannot be used as asked; the message says why and
    what to do."""


def launch_rank(launcher: str = 'none', environ=None) -> int:
    """Global rank of this process as its launcher set it, before any
    process group exists (0 when not launched distributed)."""
    environ = os.environ if environ is None else environ
    for name in _RANK_VARIABLES.get(launcher, ()):
        if environ.get(name, '').strip():
            return int(environ[name])
    return 0


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, someone else's
        return True
    return True


class WorkDirLock:
    """The lock of one training run on ``work_dir``.

    :meth:`acquire` takes it or raises :class:`WorkDirError` naming the
    live holder; :meth:`release` (also called at exit) gives it back and
    removes the file. On file systems without ``flock`` the recorded
    process id decides: a lock of a dead process on this host is taken
    over, any other is respected.
    """

    def __init__(self, work_dir: str):
        self.work_dir = osp.abspath(work_dir)
        self.path = osp.join(self.work_dir, LOCK_NAME)
        self._fd: Optional[int] = None

    def _holder(self) -> str:
        try:
            with open(self.path) as f:
                info = json.load(f)
            return (f'pid {info["pid"]} on {info["host"]}, started '
                    f'{info["started"]}')
        except (OSError, ValueError, KeyError, TypeError):
            return 'a process that left no record'

    def _busy(self):
        raise WorkDirError(
            f'work dir {self.work_dir} is in use by another training run '
            f'({self._holder()}; lock file {self.path}). Two runs in one '
            f'work dir would overwrite each other\'s checkpoints and logs: '
            f'wait for it to finish, or pass another --work-dir.')

    def _record(self, fd: int):
        info = dict(pid=os.getpid(), host=socket.gethostname(),
                    started=time.strftime('%Y-%m-%d %H:%M:%S'))
        os.ftruncate(fd, 0)
        os.lseek(fd, 0, os.SEEK_SET)
        os.write(fd, json.dumps(info).encode())
        os.fsync(fd)

    def acquire(self) -> 'WorkDirLock':
        os.makedirs(self.work_dir, exist_ok=True)
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                self._busy()
            except OSError as err:
                os.close(fd)
                if err.errno not in (errno.ENOLCK, errno.EOPNOTSUPP,
                                     errno.ENOSYS, errno.EINVAL):
                    raise
                return self._acquire_by_pid()
            # The file may have been removed by its last holder between our
            # open and flock: then the lock is on an orphan; try again.
            try:
                same = os.fstat(fd).st_ino == os.stat(self.path).st_ino
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)
        self._fd = fd
        self._record(fd)
        atexit.register(self.release)
        return self

    def _acquire_by_pid(self) -> 'WorkDirLock':
        try:
            with open(self.path) as f:
                info = json.load(f)
            live = info['host'] != socket.gethostname() or (
                info['pid'] != os.getpid() and _process_alive(info['pid']))
        except (OSError, ValueError, KeyError, TypeError):
            live = False  # empty or unreadable: no live holder recorded
        if live:
            self._busy()
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        self._record(fd)
        self._fd = fd
        atexit.register(self.release)
        return self

    def release(self):
        if self._fd is None:
            return
        # Removed while still held, so that no other run can lock the
        # file between the removal and the unlock.
        try:
            os.remove(self.path)
        except FileNotFoundError:
            pass
        os.close(self._fd)
        self._fd = None


def checkpoints_in(work_dir: str) -> List[str]:
    """Names of the ``*.pth`` files in ``work_dir``, newest first."""
    paths = glob.glob(osp.join(work_dir, '*.pth'))
    paths.sort(key=lambda p: os.stat(p).st_mtime, reverse=True)
    return [osp.basename(p) for p in paths]


def _holdings(work_dir: str) -> str:
    names = checkpoints_in(work_dir)
    if not names:
        return f'{work_dir} holds no checkpoint (*.pth)'
    shown = ', '.join(names[:5]) + (' ...' if len(names) > 5 else '')
    return f'{work_dir} holds {shown}'


def latest_checkpoint(work_dir: str) -> str:
    """The checkpoint ``<work_dir>/last_checkpoint`` names, found by the
    module's rules (the work dir's own file of that name first).

    Raises:
        WorkDirError: naming the file looked for, why it does not do, and
            the checkpoints the work dir holds.
    """
    work_dir = osp.abspath(work_dir)
    marker = osp.join(work_dir, LAST_CHECKPOINT)
    if not osp.isfile(marker):
        raise WorkDirError(f'{marker} does not exist ({_holdings(work_dir)})')
    with open(marker) as f:
        stored = f.read().strip()
    if not stored:
        raise WorkDirError(f'{marker} is empty (an interrupted save?) '
                           f'({_holdings(work_dir)})')
    stored = osp.expanduser(stored)
    if not osp.isabs(stored):
        candidates = [osp.join(work_dir, stored)]
    else:
        candidates = [osp.join(work_dir, osp.basename(stored)), stored]
    for path in candidates:
        if osp.isfile(path):
            return path
    raise WorkDirError(
        f'{marker} names {stored}, which does not exist (nor does '
        f'{candidates[0]}; {_holdings(work_dir)})')


def resume_checkpoint(work_dir: str) -> str:
    """:func:`latest_checkpoint`, for resuming: the error says what to do
    when there is nothing to resume."""
    try:
        return latest_checkpoint(work_dir)
    except WorkDirError as err:
        raise WorkDirError(
            f'nothing to resume: {err}. Pass the checkpoint to continue '
            f'from (--resume PATH), or --start-fresh to train from '
            f'scratch.') from None


def claim_work_dir(cfg, resume: Optional[str] = None,
                   start_fresh: bool = False,
                   logger=None) -> Optional[WorkDirLock]:
    """Lock ``cfg.work_dir`` for this run and settle what it resumes from.

    Args:
        cfg: the run's config (``work_dir``, ``launcher``, ``resume``,
            ``load_from``); ``resume`` and ``load_from`` are set here.
        resume: the tool's ``--resume``: None (not given; the config's own
            ``resume`` still applies), ``'auto'`` (the work dir's latest
            checkpoint) or a checkpoint path.
        start_fresh: when resuming without a path finds nothing to resume,
            train from scratch instead of refusing.
        logger: where to say what was decided (``print`` when None).

    Returns:
        The lock (held until exit), or None on ranks other than 0.
    """
    say = logger.info if logger is not None else print
    lock = None
    if launch_rank(cfg.get('launcher', 'none')) == 0:
        lock = WorkDirLock(cfg.work_dir).acquire()
    try:
        _settle_resume(cfg, resume, start_fresh, say)
    except BaseException:
        if lock is not None:
            lock.release()
        raise
    return lock


def _settle_resume(cfg, resume, start_fresh, say):
    if resume == 'auto':
        cfg.resume, cfg.load_from = True, None
    elif resume is not None:
        cfg.resume, cfg.load_from = True, resume
    if not cfg.get('resume'):
        return
    if cfg.get('load_from') is None:
        try:
            cfg.load_from = resume_checkpoint(cfg.work_dir)
        except WorkDirError:
            if not start_fresh:
                raise
            cfg.resume = False
            say(f'nothing to resume in {cfg.work_dir}: training from '
                f'scratch (--start-fresh)')
            return
    elif not osp.isfile(osp.expanduser(cfg.load_from)) and \
            '://' not in cfg.load_from:
        raise WorkDirError(f'cannot resume: checkpoint {cfg.load_from} does '
                           f'not exist')
    say(f'resuming from {cfg.load_from}')
