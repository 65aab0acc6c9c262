"""The argument checks that the package's layers, ops, hooks and metrics
share, so that every refused value is worded alike and names its argument.
"""
from typing import Collection


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


def check_unit(name: str, value) -> None:
    """Raise a ValueError naming ``name`` unless ``value`` lies in [0, 1]
    (NaN fails: every comparison with it is False)."""
    if not 0 <= value <= 1:
        raise ValueError(f'{name} must be in [0, 1], got {value!r}')
