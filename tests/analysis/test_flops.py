"""FLOP counting: exact counts on known ops, and the HGW solver fully seen."""
import pytest
import torch
import torch.nn as nn

from mmhgw.analysis import count_flops
from mmhgw.models.layers import HGWCaps


class Lambda(nn.Module):

    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, *args):
        return self.fn(*args)


def test_conv_counts_multiply_adds():
    conv = nn.Conv2d(8, 16, 3, padding=1, bias=False)
    report = count_flops(conv, (torch.randn(2, 8, 5, 7), ))
    assert report.total == report.products == 2 * 16 * 8 * 9 * 5 * 7
    assert report.elementwise == 0 and report.hgw == 0


def test_elementwise_and_reductions_count_one_per_element():
    x = torch.randn(3, 4, 5)
    report = count_flops(Lambda(lambda x: torch.exp(x).sum(-1) + 1), (x, ))
    # exp: 60 outputs; sum: 60 inputs; add: 12 outputs.
    assert report.total == 60 + 60 + 12
    assert report.by_operator == {'exp': 60, 'sum': 60, 'add': 12}
    assert report.unsupported == {}


def test_broadcast_matmul_and_einsum_count_the_whole_batch():
    a, b = torch.randn(5, 1, 3, 4), torch.randn(7, 4, 2)
    expected = 5 * 7 * 3 * 4 * 2
    assert count_flops(Lambda(torch.matmul), (a, b)).total == expected
    einsum = Lambda(lambda a, b: torch.einsum('...ij,...jk->...ik', a, b))
    assert count_flops(einsum, (a, b)).total == expected
    named = Lambda(lambda a, b: torch.einsum('nij,mjk->nmik', a[:, 0], b))
    assert count_flops(named, (a, b)).total == expected


def small_layer(**kwargs):
    layer = HGWCaps(32, 32, 3, padding=1, in_types=8, out_types=8,
                    num_parts=4, part_dim=4, **kwargs)
    layer.eval()
    return layer


def test_every_op_of_the_hgw_layer_is_counted():
    x = torch.randn(1, 32, 6, 6)
    report = count_flops(small_layer(), (x, ))
    assert report.unsupported == {}
    assert report.hgw == report.total
    # The solver's elementwise work is a large share, not a rounding error.
    assert report.elementwise > 0.3 * report.total


def test_each_proximal_step_adds_the_same_work():
    """The count follows the iterations: linear in outer_iters, and above
    the uniform routing (no solver) by more than the plan products."""
    x = torch.randn(1, 32, 6, 6)
    totals = [count_flops(small_layer(outer_iters=n), (x, )).total
              for n in (1, 2, 3)]
    assert totals[2] - totals[1] == pytest.approx(totals[1] - totals[0])
    assert totals[1] > totals[0]
    uniform = count_flops(small_layer(routing='uniform'), (x, )).total
    assert uniform < totals[0]
