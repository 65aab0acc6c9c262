"""Loading mmengine checkpoints under torch's ``weights_only=True`` default.

mmengine 0.10.7 calls ``torch.load`` without ``weights_only``; since torch 2.6
that means ``weights_only=True``, whose unpickler refuses every global that
is not allow-listed. A Runner checkpoint holds, besides tensors, the
MessageHub's ``HistoryBuffer`` objects (which keep numpy arrays) and numpy
scalars. Exactly those globals are allow-listed here; the safety of
``weights_only`` stays on for everything else.

Two need care. ``HistoryBuffer.__getstate__`` pickles its statistics
methods as ``getattr(HistoryBuffer, 'mean')`` and so on. Allow-listing the
builtin ``getattr`` would let a crafted file reach any attribute of any
allowed object, so the pickled name ``builtins.getattr`` is bound instead to
:func:`history_buffer_getattr`, which resolves only those methods. And
``HistoryBuffer.__setstate__`` merges the pickled methods into the
class-level table every buffer of the process uses, so a crafted state
could make every logged mean a max; the pickled name ``HistoryBuffer`` is
bound to :class:`CheckedHistoryBuffer`, which refuses any state but a
buffer's own and leaves the table as it is.

Every checkpoint file the project reads goes through one function,
:func:`load_checkpoint_file` (``weights_only=True`` with this allow-list,
errors naming the file); importing mmhgw makes it mmengine's loader of local
files, so the Runner's ``load_from`` / ``resume``, ``load_checkpoint`` and
``init_cfg`` Pretrained use it too.
"""
import os.path as osp
import pickle

import numpy as np
import torch
from mmengine.logging.history_buffer import HistoryBuffer

if int(np.__version__.split('.')[0]) >= 2:  # helpers moved in numpy 2
    from numpy._core import multiarray as _multiarray
else:
    from numpy.core import multiarray as _multiarray

#: numpy scalar types whose dtype classes a checkpoint may reference.
_NUMPY_SCALARS = (np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8,
                  np.uint16, np.uint32, np.uint64, np.float16, np.float32,
                  np.float64)

#: The statistics methods ``HistoryBuffer`` pickles by attribute.
HISTORY_BUFFER_METHODS = ('min', 'max', 'current', 'mean')

#: What ``HistoryBuffer`` pickles besides ``statistics_methods``.
HISTORY_BUFFER_STATE = {
    'max_length': int, '_log_history': np.ndarray, '_count_history': np.ndarray
}


class CheckedHistoryBuffer(HistoryBuffer):
    """Stands in for ``HistoryBuffer`` while a checkpoint loads.

    Accepts only a buffer's own state (``HISTORY_BUFFER_STATE`` with their
    types) and statistics methods that are the ones already registered
    under their names, so that loading cannot change the class-level table
    that every buffer of the process computes its statistics with. Once
    checked, the object becomes a plain ``HistoryBuffer`` (and is saved as
    one again).
    """

    def __setstate__(self, state):
        if not isinstance(state, dict):
            raise pickle.UnpicklingError(
                f'HistoryBuffer state must be a dict, got {type(state)}')
        state = dict(state)
        methods = state.pop('statistics_methods', {})
        if not isinstance(methods, dict):
            raise pickle.UnpicklingError(
                'HistoryBuffer statistics_methods must be a dict')
        registered = dict(HistoryBuffer._statistics_methods)
        registered.update(
            (n, getattr(HistoryBuffer, n)) for n in HISTORY_BUFFER_METHODS)
        for name, method in methods.items():
            if registered.get(name) is not method:
                raise pickle.UnpicklingError(
                    f'refusing HistoryBuffer statistics method {name!r} = '
                    f'{method!r} while loading a checkpoint: loading may not '
                    f'change the methods registered in this process')
        for name, value in state.items():
            kind = HISTORY_BUFFER_STATE.get(name)
            if kind is None or not isinstance(value, kind):
                raise pickle.UnpicklingError(
                    f'refusing HistoryBuffer attribute {name!r} of type '
                    f'{type(value).__name__} while loading a checkpoint')
        self.__class__ = HistoryBuffer
        HistoryBuffer.__setstate__(self, state)


def history_buffer_getattr(owner, name):
    """``getattr`` restricted to ``HistoryBuffer``'s statistics methods."""
    if owner in (HistoryBuffer, CheckedHistoryBuffer) and \
            name in HISTORY_BUFFER_METHODS:
        return getattr(HistoryBuffer, name)
    raise pickle.UnpicklingError(
        f'refusing getattr({owner!r}, {name!r}) while loading a checkpoint: '
        f'only HistoryBuffer.{HISTORY_BUFFER_METHODS} are allowed')


def mmengine_checkpoint_globals():
    """The globals an mmengine Runner checkpoint pickles besides tensors."""
    return [
        (CheckedHistoryBuffer,
         f'{HistoryBuffer.__module__}.{HistoryBuffer.__qualname__}'),
        (history_buffer_getattr, 'builtins.getattr'),
        _multiarray._reconstruct,
        _multiarray.scalar,
        np.ndarray,
        np.dtype,
        *(type(np.dtype(t)) for t in _NUMPY_SCALARS),
    ]


def allow_mmengine_checkpoints():
    """Allow-list :func:`mmengine_checkpoint_globals` for ``torch.load``.

    Idempotent; a no-op on torch releases without ``add_safe_globals``.
    A plain allow-listing of ``HistoryBuffer`` (by other code) is replaced
    by the checked stand-in: torch keeps the allow-list in a set, so with
    both it would be chance which one a checkpoint gets.
    """
    add = getattr(torch.serialization, 'add_safe_globals', None)
    if add is not None:
        current = torch.serialization.get_safe_globals()
        if HistoryBuffer in current:
            torch.serialization.clear_safe_globals()
            add([g for g in current if g is not HistoryBuffer])
        add(mmengine_checkpoint_globals())
    use_safe_local_loader()


def _head(filename: str) -> bytes:
    with open(filename, 'rb') as f:
        return f.read(64)


def looks_like_torch_file(filename: str) -> bool:
    # torch.save writes a zip archive; the legacy format starts with a
    # pickle protocol opcode.
    head = _head(filename)
    return head.startswith(b'PK') or head[:1] == b'\x80'


def describe_unreadable(filename: str) -> str:
    """Why ``filename`` is no checkpoint, in words, from its first bytes."""
    size = osp.getsize(filename)
    if size == 0:
        return 'the file is empty (0 bytes; an interrupted save?)'
    head = _head(filename)
    if looks_like_torch_file(filename):
        return (f'it looks like a PyTorch file of {size} bytes but cannot '
                f'be read: truncated or corrupt?')
    try:
        text = head.decode('utf-8')
    except UnicodeDecodeError:
        return f'it is not a PyTorch checkpoint ({size} bytes)'
    return (f'it is a text file, not a PyTorch checkpoint ({size} bytes, '
            f'starting {text[:32]!r})')


def _refusal_reason(err: Exception) -> str:
    """What torch's weights-only unpickler refused, without its preamble
    (the advice to retry with ``weights_only=False``) and its link."""
    parts = [p.strip() for p in str(err).split('\n\n') if p.strip()]
    kept = [
        p for p in parts if not p.startswith(('Weights only load failed',
                                              'Check the documentation'))
    ]
    return ' '.join(kept) or str(err)


def load_checkpoint_file(filename: str, map_location=None):
    """Read the checkpoint file ``filename``: the project's one ``torch.load``.

    ``weights_only=True`` always (whatever torch's default or the
    ``TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD`` environment variable say), with
    :func:`mmengine_checkpoint_globals` allow-listed: a crafted pickle is
    refused, a Runner checkpoint loads. A file that cannot be read (empty,
    text, truncated) fails naming the file and what is wrong with it (torch
    alone says ``EOFError`` or ``IndexError``). Registered as mmengine's
    loader of local files, so the Runner's ``load_from`` / ``resume``,
    ``load_checkpoint`` and ``init_cfg=dict(type='Pretrained')`` read
    through it; the tools call it directly.

    Args:
        filename: path of a file written by ``torch.save``.
        map_location: as ``torch.load``'s.
    """
    path = osp.expanduser(filename)
    if not osp.isfile(path):
        raise FileNotFoundError(f'checkpoint {filename} can not be found '
                                f'(no such file)')
    allow_mmengine_checkpoints()
    try:
        return torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as err:
        # torch's weights_only refusals of a real checkpoint keep their
        # type and explanation, without its advice to load with
        # weights_only=False (what a crafted file needs).
        if not looks_like_torch_file(path):
            raise RuntimeError(f'cannot load checkpoint {filename}: '
                               f'{describe_unreadable(path)}') from err
        reason = _refusal_reason(err)
        raise pickle.UnpicklingError(
            f'cannot load checkpoint {filename}: it holds objects that are '
            f'not allowed in a checkpoint (only tensors, plain values and '
            f'mmengine\'s logging buffers are): {reason}') from err
    except Exception as err:
        raise RuntimeError(
            f'cannot load checkpoint {filename}: '
            f'{describe_unreadable(path)} ({type(err).__name__}: '
            f'{err})') from err


def use_safe_local_loader():
    """Make :func:`load_checkpoint_file` mmengine's loader of local files
    (idempotent). Remote checkpoints (``http(s)://``, ``torchvision://``,
    ``open-mmlab://``) are downloaded by mmengine and read by ``torch.load``
    with torch's default, ``weights_only=True``, under the same
    allow-list."""
    from mmengine.runner.checkpoint import CheckpointLoader
    if CheckpointLoader._schemes.get('') is not load_checkpoint_file:
        CheckpointLoader.register_scheme(prefixes='',
                                         loader=load_checkpoint_file,
                                         force=True)
