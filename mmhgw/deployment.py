"""ONNX export of models with HGW capsule layers.

The routing op ``mmhgw::hgw_routing`` is a custom op, which ONNX has no
counterpart for: the export replaces it by its specification in standard
operations (:func:`mmhgw.ops.hgw_routing_decomposition`, the torch reference
on all locations at once), so the exported graph runs on any ONNX runtime
with no custom-op library. The fused kernels' memory savings do not carry
over: the graph materialises the plans ([locations, types, V_p, V_q] per
layer) as the torch reference does.

Path: ``torch.export`` (the op as one node), the op decomposed, then
PyTorch's ONNX exporter (which needs ``onnxscript``) at opset 18, the lowest
it writes; other opsets come from ONNX's version converter.
"""
from typing import List, Optional, Sequence, Tuple

import torch
import torch.nn as nn

#: The opset PyTorch's ONNX exporter writes.
EXPORTER_OPSET = 18

#: Reductions that take their axes as an attribute below opset 18, where
#: the attribute ``noop_with_empty_axes`` (opset 18) does not exist.
_REDUCTIONS = ('ReduceL1', 'ReduceL2', 'ReduceLogSum', 'ReduceLogSumExp',
               'ReduceMax', 'ReduceMean', 'ReduceMin', 'ReduceProd',
               'ReduceSumSquare')


class NotExportableError(RuntimeError):
    """``torch.export`` cannot capture the model as one graph."""


def _check_exporter():
    missing = []
    for name in ('onnx', 'onnxscript'):
        try:
            __import__(name)
        except ImportError:
            missing.append(name)
    if missing:
        raise ImportError(f'ONNX export needs {" and ".join(missing)}: '
                          f'pip install onnx onnxscript (onnxruntime to run '
                          f'the result)')


def _convert_opset(model, opset_version: int):
    """``model`` (opset :data:`EXPORTER_OPSET`) at ``opset_version`` by
    ONNX's version converter, whose 18 -> 17 step leaves the opset-18
    attribute ``noop_with_empty_axes`` on the reductions that take their
    axes as an attribute again (invalid there; with axes given it is the
    default behaviour, so it is dropped)."""
    import onnx
    from onnx import version_converter
    try:
        model = version_converter.convert_version(model, opset_version)
    except Exception as err:
        raise RuntimeError(f'the ONNX version converter cannot take the '
                           f'exported graph from opset {EXPORTER_OPSET} to '
                           f'{opset_version}: {err}') from err
    if opset_version < 18:
        for node in model.graph.node:
            if node.op_type in _REDUCTIONS:
                keep = [
                    a for a in node.attribute
                    if a.name != 'noop_with_empty_axes'
                ]
                del node.attribute[:]
                node.attribute.extend(keep)
    onnx.checker.check_model(model)
    return model


def export_onnx(model: nn.Module, args: Tuple[torch.Tensor, ...], path: str, *,
                opset_version: int = 17,
                input_names: Optional[Sequence[str]] = None,
                output_names: Optional[Sequence[str]] = None):
    """Write ``model(*args)`` (in eval mode, fixed input shapes) to the
    ONNX file ``path`` in standard operations at ``opset_version``
    (17 or later); returns the ONNX ``ModelProto``.

    Args:
        model: any module, e.g. an HGWCaps backbone, or a detector or
            segmentor in tensor mode
            (:class:`mmhgw.analysis.tracing.TensorModeModel`).
        args: example inputs; the graph is exported for their shapes.
    """
    _check_exporter()
    import onnx

    from mmhgw.ops import hgw_routing_decomposition
    if opset_version < 17:
        raise ValueError(f'opset_version must be >= 17, got '
                         f'{opset_version}')
    try:
        program = torch.export.export(model, tuple(args))
    except Exception as err:
        # Data-dependent control flow, untraceable extensions, ...: the
        # first line says which.
        reason = str(err).strip().splitlines()[0] if str(err) else ''
        raise NotExportableError(
            f'torch.export cannot trace {type(model).__name__}: '
            f'{type(err).__name__}: {reason}') from err
    program = program.run_decompositions(
        {torch.ops.mmhgw.hgw_routing.default: hgw_routing_decomposition})
    exported = torch.onnx.export(program, tuple(args), dynamo=True,
                                 opset_version=EXPORTER_OPSET,
                                 input_names=input_names,
                                 output_names=output_names, verbose=False)
    proto = exported.model_proto
    if opset_version != EXPORTER_OPSET:
        proto = _convert_opset(proto, opset_version)
    onnx.save(proto, path)
    return proto


def run_onnx(path: str, args: Sequence[torch.Tensor]) -> List[torch.Tensor]:
    """The outputs of the ONNX file ``path`` on ``args``, by onnxruntime on
    the CPU."""
    try:
        import onnxruntime
    except ImportError as err:
        raise ImportError('running an ONNX file needs onnxruntime: pip '
                          'install onnxruntime') from err
    session = onnxruntime.InferenceSession(path,
                                           providers=['CPUExecutionProvider'])
    feeds = {
        i.name: a.detach().cpu().numpy()
        for i, a in zip(session.get_inputs(), args)
    }
    return [torch.from_numpy(out) for out in session.run(None, feeds)]
