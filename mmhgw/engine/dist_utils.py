"""Small collectives the hooks share."""
import torch
from mmengine.dist import all_reduce, get_world_size


def max_over_ranks(value: float) -> float:
    """The largest ``value`` over all ranks (``value`` itself outside a
    distributed run): one scalar all-reduce, on the backend's device."""
    if get_world_size() == 1:
        return value
    flag = torch.tensor(float(value))
    all_reduce(flag, op='max')
    return flag.item()
