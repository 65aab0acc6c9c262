"""For the tests only: what a model reports through mmengine's logger, a
free port for distributed runs."""
import logging
import socket
from typing import Callable

from mmengine.logging import MMLogger


def logged(func: Callable[[], object]) -> str:
    """The messages the current MMLogger records while ``func()`` runs,
    joined by spaces (for tests of what a model reports)."""
    records = []
    handler = logging.Handler()
    handler.emit = records.append
    logger = MMLogger.get_current_instance()
    logger.addHandler(handler)
    try:
        func()
    finally:
        logger.removeHandler(handler)
    return ' '.join(r.getMessage() for r in records)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]
