"""The routing op in graphs: torch.compile, torch.export and torch.jit.trace
keep the fused op as one node (no graph break, no swap for the reference)
and match eager, for the op and for an HGWCaps backbone."""
import pytest
import torch

import mmhgw  # noqa: F401
from mmhgw.benchmarking import random_routing_inputs
from mmhgw.models.backbones import HGWCapsResNet
from mmhgw.ops import hgw_routing

#: The op as torch.export (the overload) and Dynamo (the packet) name it.
OP = (torch.ops.mmhgw.hgw_routing.default, torch.ops.mmhgw.hgw_routing)
HGW = dict(type='HGWCaps', in_types=4, out_types=4, num_parts=3, part_dim=4)


def routing(*inputs):
    return hgw_routing(*inputs[:7], eps=1e-2, outer_iters=2, inner_iters=3,
                       pose_weight=inputs[7])


def op_inputs():
    inputs = random_routing_inputs(6, 3, 16, 8, 4, torch.float32)
    inputs.append(torch.randn(3, 32, 5))
    return [t.requires_grad_() for t in inputs]


def holding_the_op(graphs):
    """A torch.compile backend that records each graph it is given."""

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    return backend


def backbone():
    torch.manual_seed(0)
    model = HGWCapsResNet(depth=18, base_channels=8, hgw_cfg=HGW,
                          out_indices=(0, 1, 2, 3), init_cfg=None)
    model.eval()  # the stock ResNet's train() returns None
    return model


def test_compiled_op_is_one_graph_with_the_op_and_its_gradients():
    """fullgraph: a graph break (e.g. at a float(beta)) fails; AOT autograd
    runs the fake kernel and the registered backward."""
    inputs = op_inputs()
    expected = routing(*inputs)
    upstream = [torch.randn_like(t) for t in expected]
    grads_expected = torch.autograd.grad(expected, inputs, upstream)
    graphs = []
    compiled = torch.compile(routing, fullgraph=True,
                             backend=holding_the_op(graphs))
    out = compiled(*inputs)
    grads = torch.autograd.grad(out, inputs, upstream)
    assert len(graphs) == 1
    assert any(node.target in OP for node in graphs[0].graph.nodes)
    for a, b in zip((*out, *grads), (*expected, *grads_expected)):
        torch.testing.assert_close(a, b)
    aot = torch.compile(routing, fullgraph=True, backend='aot_eager')
    out = aot(*inputs)
    grads = torch.autograd.grad(out, inputs, upstream)
    for a, b in zip((*out, *grads), (*expected, *grads_expected)):
        torch.testing.assert_close(a, b)


def test_backbone_compiles_without_a_graph_break():
    model = backbone()
    x = torch.randn(1, 3, 32, 32)
    with torch.no_grad():
        expected = model(x)
        graphs = []
        out = torch.compile(model, fullgraph=True,
                            backend=holding_the_op(graphs))(x)
    assert len(graphs) == 1
    assert sum(node.target in OP for node in graphs[0].graph.nodes) == 4
    for a, b in zip(out, expected):
        torch.testing.assert_close(a, b)


def test_exported_backbone_runs_the_op():
    model = backbone()
    x = torch.randn(1, 3, 32, 32)
    program = torch.export.export(model, (x, ))
    assert sum(node.target in OP for node in program.graph.nodes) == 4
    with torch.no_grad():
        expected = model(x)
    for a, b in zip(program.module()(x), expected):
        torch.testing.assert_close(a, b)


def test_traced_backbone_runs_the_op():
    model = backbone()
    x = torch.randn(1, 3, 32, 32)
    with pytest.warns(torch.jit.TracerWarning):
        traced = torch.jit.trace(model, (x, ), check_trace=False)
    kinds = [node.kind() for node in traced.inlined_graph.nodes()]
    assert kinds.count('mmhgw::hgw_routing') == 4
    assert 'prim::PythonOp' not in kinds
    with torch.no_grad():
        expected = model(x)
        for a, b in zip(traced(x), expected):
            torch.testing.assert_close(a, b)
