"""Loading mmengine checkpoints under torch's ``weights_only=True`` default.

mmengine 0.10.7 calls ``torch.load`` without ``weights_only``; since torch 2.6
that means ``weights_only=True``, whose unpickler refuses every global that
is not allow-listed. A Runner checkpoint holds, besides tensors, the
MessageHub's ``HistoryBuffer`` objects (which keep numpy arrays) and numpy
scalars. Exactly those globals are allow-listed here; the safety of
``weights_only`` stays on for everything else.

One needs care: ``HistoryBuffer.__getstate__`` pickles its statistics
methods as ``getattr(HistoryBuffer, 'mean')`` and so on. Allow-listing the
builtin ``getattr`` would let a crafted file reach any attribute of any
allowed object, so the pickled name ``builtins.getattr`` is bound instead to
:func:`history_buffer_getattr`, which resolves only those methods.
"""
import pickle

import numpy as np
import torch

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


def history_buffer_getattr(owner, name):
    """``getattr`` restricted to ``HistoryBuffer``'s statistics methods."""
    from mmengine.logging.history_buffer import HistoryBuffer
    if owner is HistoryBuffer and name in HISTORY_BUFFER_METHODS:
        return getattr(HistoryBuffer, name)
    raise pickle.UnpicklingError(
        f'refusing getattr({owner!r}, {name!r}) while loading a checkpoint: '
        f'only HistoryBuffer.{HISTORY_BUFFER_METHODS} are allowed')


def mmengine_checkpoint_globals():
    """The globals an mmengine Runner checkpoint pickles besides tensors."""
    from mmengine.logging.history_buffer import HistoryBuffer
    return [
        HistoryBuffer,
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
    """
    add = getattr(torch.serialization, 'add_safe_globals', None)
    if add is not None:
        add(mmengine_checkpoint_globals())
