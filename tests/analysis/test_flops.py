"""FLOP counting: exact counts on known ops, the HGW solver fully seen (the
routing op as its reference's operations), also by mmengine's own analyzer."""
import os.path as osp

import pytest
import torch
import torch.nn as nn
from mmengine.analysis import get_model_complexity_info

from mmhgw.analysis import count_flops
from mmhgw.analysis.tracing import TensorModeModel
from mmhgw.benchmarking import random_routing_inputs
from mmhgw.config_utils import build_config_model, load_offline_config
from mmhgw.models.layers import HGWCaps
from mmhgw.ops import hgw_routing, hgw_routing_reference


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
    layer = HGWCaps(32, 32, 3, padding=1, in_types=8, out_types=8, num_parts=4,
                    part_dim=4, **kwargs)
    layer.eval()
    return layer


def test_every_op_of_the_hgw_layer_is_counted():
    x = torch.randn(1, 32, 6, 6)
    report = count_flops(small_layer(), (x, ))
    assert report.unsupported == {}
    assert report.hgw == report.total
    # The solver's elementwise work is a large share, not a rounding error.
    assert report.elementwise > 0.3 * report.total


@pytest.mark.parametrize('components', ['types', 'positions'])
@pytest.mark.parametrize('padding_mode', ['zeros', 'reflect'])
def test_every_op_of_a_padded_layer_is_counted(components, padding_mode):
    # A padding mode other than zeros pads the input before the embedding
    # convolution: a copy, counted as such.
    layer = small_layer(components=components, padding_mode=padding_mode)
    report = count_flops(layer, (torch.randn(1, 32, 6, 6), ))
    assert report.unsupported == {}
    assert report.hgw == report.total > 0


def test_each_proximal_step_adds_the_same_work():
    """The count follows the iterations: linear in outer_iters, and above
    the uniform routing (no solver) by more than the plan products."""
    x = torch.randn(1, 32, 6, 6)
    totals = [
        count_flops(small_layer(outer_iters=n), (x, )).total for n in (1, 2, 3)
    ]
    assert totals[2] - totals[1] == pytest.approx(totals[1] - totals[0])
    assert totals[1] > totals[0]
    uniform = count_flops(small_layer(routing='uniform'), (x, )).total
    assert uniform < totals[0]


class Routing(nn.Module):
    """The op (``specification=False``) or its reference and pose map."""

    def __init__(self, specification, pose_map, **options):
        super().__init__()
        self.specification, self.pose_map = specification, pose_map
        self.options = options

    def forward(self, *inputs):
        weight = inputs[7] if self.pose_map else None
        if not self.specification:
            return hgw_routing(*inputs[:7], pose_weight=weight, **self.options)
        dist, parts = hgw_routing_reference(*inputs[:7], chunk_entries=None,
                                            **self.options)
        if weight is None:
            return dist, parts
        return dist, torch.einsum('mnk,nko->mno', parts.flatten(-2), weight)


@pytest.mark.parametrize('pose_map', [False, True])
@pytest.mark.parametrize('options', [
    dict(eps=1e-2, outer_iters=3, inner_iters=4),
    dict(eps=1e-1, outer_iters=2, inner_iters=1, regularizer='entropic'),
    dict(eps=1e-2, outer_iters=2, inner_iters=2, routing='uniform')
])
def test_routing_op_counts_the_operations_of_its_reference(pose_map, options):
    """One op node in the traced graph, counted per operator kind exactly
    as its reference's operations (at shapes other than the handle's own
    probes)."""
    inputs = random_routing_inputs(5, 3, 7, 4, 3, torch.float32)
    inputs.append(torch.randn(3, 12, 6))
    op = count_flops(Routing(False, pose_map, **options), tuple(inputs))
    ref = count_flops(Routing(True, pose_map, **options), tuple(inputs))
    assert op.unsupported == {} and ref.unsupported == {}
    assert op.by_operator == ref.by_operator
    assert op.total == ref.total and op.products == ref.products


def test_upstream_analyzer_counts_an_hgwcaps_model_within_one_percent():
    """mmengine's get_model_complexity_info (what mmdet's and mmseg's
    get_flops call) sees the routing op through the handle mmhgw registers
    at import: it misses only the elementwise ops it never counts."""
    root = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
    cfg = load_offline_config(
        osp.join(root, 'configs/demo/unet-hgwcaps-s5-d16_fcn_demo-isic.py'),
        seg_size=(32, 32))
    model = build_config_model(cfg, init=False)
    model.eval()
    wrapped = TensorModeModel(model, 'mmseg', (32, 32))
    image = torch.randn(1, 3, 32, 32)
    ours = count_flops(wrapped, (image, ))
    assert ours.hgw > 0.1 * ours.total
    upstream = get_model_complexity_info(wrapped, inputs=(image, ),
                                         show_table=False, show_arch=False)
    assert abs(upstream['flops'] / ours.total - 1) < 0.01
