import os

import pytest
import torch.distributed as dist
import torch.multiprocessing as mp

from mmhgw.engine.dist_utils import max_over_ranks
from mmhgw.testing import free_port


def _rank_main(rank, world, port, values, results):
    os.environ.update(MASTER_ADDR='127.0.0.1', MASTER_PORT=str(port))
    dist.init_process_group('gloo', rank=rank, world_size=world)
    try:
        results[rank] = max_over_ranks(values[rank])
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize('values', [(0, 15), (2, 0), (0, 0), (1.5, 0.25)])
def test_every_rank_gets_the_largest_value(values):
    results = mp.Manager().dict()
    mp.spawn(_rank_main, args=(2, free_port(), values, results), nprocs=2)
    assert dict(results) == {0: max(values), 1: max(values)}


def test_outside_a_distributed_run_the_value_itself():
    assert max_over_ranks(7) == 7
    assert max_over_ranks(0.5) == 0.5
