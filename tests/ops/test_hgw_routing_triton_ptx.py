"""The Triton routing kernels compile for an H100 / H200 (sm_90) on any
machine: Triton's compiler and its bundled ptxas need no GPU. The
interpreter (test_hgw_routing_triton.py) checks what the kernels compute;
this checks that the compiler accepts them, that their products run on
tensor cores and what they cost in registers.
"""
import os

import pytest
import torch

pytest.importorskip('triton')
pytest.importorskip('triton.backends.nvidia.compiler')
if os.environ.get('TRITON_INTERPRET') == '1':
    pytest.skip('the kernels are interpreted in this process',
                allow_module_level=True)


@pytest.mark.parametrize('dtype', [torch.float32, torch.float64])
def test_kernels_compile_for_sm90(dtype):
    from mmhgw.ops.hgw_routing_triton import compile_report
    report = compile_report(90, dtype, V_p=32, V_q=8, d=8)
    print(dtype, report)
    assert set(report) == {'forward', 'backward'}
    for kernel in report.values():
        # ptxas reported the kernel within the sm_90 register file.
        assert kernel['registers'] is not None
        assert 0 < kernel['registers'] <= 255
        assert kernel['spill_bytes'] >= 0
        # Loads on an H100 / H200 at the layer's shape without being
        # halved: 227 KiB of shared memory a block.
        assert 0 < kernel['shared_bytes'] <= 232448, report
    if dtype == torch.float32:
        # The hot path: the GW products on tensor cores, the forward's
        # tile in registers. The backward's tile spills: the larger tile
        # that spills was the faster on an H100 (docs/benchmarks.md).
        assert all(k['tensor_cores'] for k in report.values()), report
        assert report['forward']['spill_bytes'] == 0, report


def test_uniform_routing_and_options_compile():
    from mmhgw.ops.hgw_routing_triton import compile_report
    report = compile_report(90, torch.float32, V_p=5, V_q=3, d=2,
                            options=dict(routing='uniform', inner_iters=1))
    assert all(k['registers'] for k in report.values())


def test_each_kernel_takes_its_own_products(monkeypatch):
    # ieee products in the backward kernel alone: its PTX loses the
    # tensor-core instructions, the forward's keeps them.
    from mmhgw.ops import hgw_routing_triton as kernels
    monkeypatch.setattr(kernels, 'BACKWARD_PRODUCTS', 'ieee')
    report = kernels.compile_report(90, torch.float32, V_p=5, V_q=3, d=2)
    assert report['forward']['tensor_cores'], report
    assert not report['backward']['tensor_cores'], report


@pytest.mark.parametrize('options, message', [
    (dict(outer=2), r"unknown options \['outer'\]"),
    (dict(outer_iters=0), 'outer_iters must be an int >= 1'),
    (dict(routing='hard'), 'routing must be one of'),
])
def test_bad_options_are_refused_naming_them(options, message):
    from mmhgw.ops.hgw_routing_triton import compile_report
    with pytest.raises(ValueError, match=message):
        compile_report(90, torch.float32, V_p=5, V_q=3, d=2, options=options)
