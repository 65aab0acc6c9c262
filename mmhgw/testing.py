"""For tests, benchmarks and offline tools: configs that load with no
downloads and CPU norms; layer-like inputs of the routing op; progress bars
that stay out of log files."""
import contextlib
import logging
import sys
from typing import Callable, Iterator, Optional, Tuple

import torch
from mmengine.config import Config
from mmengine.logging import MMLogger
from mmengine.registry import init_default_scope

from .config_utils import load_config, sync_bn_to_bn


def load_config_for_test(path: str, seg_size: Optional[Tuple[int, int]] = None,
                         keep_init: bool = False) -> Config:
    """A config ready to build offline on one CPU process.

    Pretrained weights cannot be fetched offline, so ``init_cfg`` /
    ``pretrained`` are dropped (unless ``keep_init``); SyncBN becomes BN
    (it needs a process group); ``seg_size`` shrinks mmseg's fixed input
    padding size.
    """
    cfg = load_config(path)
    if not keep_init:
        cfg.model.pop('pretrained', None)
        cfg.model.backbone.init_cfg = None
    sync_bn_to_bn(cfg.model)
    if seg_size is not None:
        cfg.model.data_preprocessor.size = seg_size
    return cfg


def build_model_for_test(cfg: Config, init: bool = True):
    """Build ``cfg.model`` in the config's default scope, with its weights
    initialised when ``init``: quietly, warnings aside (mmengine logs a
    line per parameter, which buries a tool's own output)."""
    init_default_scope(cfg.get('default_scope', 'mmengine'))
    from mmengine.registry import MODELS
    model = MODELS.build(cfg.model)
    if init:
        logger = MMLogger.get_current_instance()
        level = logger.level
        logger.setLevel(max(level, logging.WARNING))
        try:
            model.init_weights()
        finally:
            logger.setLevel(level)
    return model


@contextlib.contextmanager
def progress(total: int) -> Iterator[Callable[[], None]]:
    """Yields ``step()``, which advances mmengine's progress bar over
    ``total`` steps when stdout is a terminal and does nothing otherwise:
    the bar redraws itself with carriage returns, which pile up in a log
    file."""
    if not sys.stdout.isatty():
        yield lambda: None
        return
    from mmengine.utils import ProgressBar
    bar = ProgressBar(total, file=sys.stdout)
    yield bar.update
    sys.stdout.write('\n')


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


def routing_inputs(M: int, N: int, V_p: int, V_q: int, d: int,
                   dtype: torch.dtype = torch.float64, seed: int = 0) -> list:
    """Layer-like inputs of :func:`mmhgw.ops.hgw_routing`: ``[X_p, X_q, h1,
    h2, row, col, beta]`` for M locations and N output types, with positive
    symmetric structures in [1/2, 1], uniform marginals and beta 1/2."""
    from mmhgw.ot import gw_factors
    g = torch.Generator().manual_seed(seed)
    X_p = torch.randn(M, V_p, d, generator=g, dtype=dtype)
    X_q = torch.randn(N, V_q, d, generator=g, dtype=dtype)
    C_p = 0.5 + 0.5 * torch.rand(M, V_p, V_p, generator=g, dtype=dtype)
    C_q = 0.5 + 0.5 * torch.rand(N, V_q, V_q, generator=g, dtype=dtype)
    C_p, C_q = (C_p + C_p.mT) / 2, (C_q + C_q.mT) / 2
    row, col, h1, h2 = gw_factors(C_p, C_q,
                                  torch.full((V_p, ), 1 / V_p, dtype=dtype),
                                  torch.full((V_q, ), 1 / V_q, dtype=dtype))
    return [X_p, X_q, h1, h2, row, col, torch.tensor(0.5, dtype=dtype)]
