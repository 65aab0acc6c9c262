"""The argument checks that the package's layers, ops, hooks and metrics
share, so that every refused value is worded alike and names its argument.
"""
import math
import numbers
from typing import Callable, Collection, Tuple

#: A range of real numbers: (what the message says is expected, the test).
#: The tests are written so that NaN fails (every comparison with NaN is
#: False).
Bounds = Tuple[str, Callable[[float], bool]]
UNIT: Bounds = ('in [0, 1]', lambda v: 0 <= v <= 1)
POSITIVE: Bounds = ('a positive finite number', lambda v: 0 < v < math.inf)
AT_LEAST_0: Bounds = ('a finite number >= 0', lambda v: 0 <= v < math.inf)


def check_choice(name: str, value, allowed: Collection) -> None:
    """Raise a ValueError naming ``name`` unless ``value`` is one of
    ``allowed``."""
    if value not in allowed:
        raise ValueError(f'{name} must be one of {tuple(allowed)}, '
                         f'got {value!r}')


def check_int(name: str, value, minimum: int = 1, *,
              optional: bool = False) -> None:
    """Raise a ValueError naming ``name`` unless ``value`` is an int of at
    least ``minimum`` (``None`` too where ``optional``). A bool is refused:
    a config's ``True`` would otherwise pass as 1."""
    if optional and value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) \
            or value < minimum:
        expected = f'an int >= {minimum}'
        raise ValueError(f'{name} must be {"None or " if optional else ""}'
                         f'{expected}, got {value!r}')


def check_number(name: str, value, bounds: Bounds) -> None:
    """Raise a ValueError naming ``name`` unless ``value`` is a real number
    (not a bool or a string: a config's ``True`` or ``'0.5'`` would
    otherwise fail later without naming it) within ``bounds``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f'{name} must be a number, got {value!r}')
    expected, holds = bounds
    if not holds(value):
        raise ValueError(f'{name} must be {expected}, got {value!r}')


def check_unit(name: str, value) -> None:
    """:func:`check_number` in [0, 1]."""
    check_number(name, value, UNIT)
