"""Export a detector, a segmentor or its backbone to ONNX, HGW capsules in
standard ONNX operations (no custom-op library needed to run the file).

Exports the network in tensor mode (no pre- or post-processing: mmdet's
backbone, neck and heads' raw outputs; mmseg's logits) for a fixed
``1 x 3 x H x W`` input, or only the backbone (``--backbone-only``), at
``--opset`` (17 by default). The capsule layers' routing op becomes its
torch reference in plain operations (:mod:`mmhgw.deployment`). Models whose
tensor mode holds mmcv's compiled ops (RoIAlign and NMS of two-stage
detectors such as Mask R-CNN) cannot be exported this way: export their
backbone, or use mmdeploy, which rewrites those ops.

    python tools/deployment/pytorch2onnx.py CONFIG --out model.onnx \
        [--checkpoint CKPT] [--shape H W] [--opset 17] [--backbone-only] \
        [--verify] [--cfg-options k=v ...]

Needs ``onnx`` and ``onnxscript`` (``--verify``: ``onnxruntime``).
"""
import argparse

import torch

from mmhgw.analysis.tracing import (TensorModeModel, add_shape_arg,
                                    load_traced_config)
from mmhgw.config_utils import build_config_model
from mmhgw.deployment import NotExportableError, export_onnx, run_onnx


def parse_args(argv=None):
    from mmengine.config import DictAction
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('config', help='config file (or pkg::path)')
    parser.add_argument('--out', required=True, help='ONNX file to write')
    parser.add_argument(
        '--checkpoint', help='weights to export (default: '
        'the initialised weights, for trying the export)')
    add_shape_arg(parser)
    parser.add_argument('--opset', type=int, default=17,
                        help='ONNX opset (>= 17)')
    parser.add_argument('--backbone-only', action='store_true',
                        help='export model.backbone only')
    parser.add_argument(
        '--verify', action='store_true',
        help='run the file with onnxruntime and compare '
        'with PyTorch')
    parser.add_argument(
        '--tolerance', type=float, default=1e-3,
        help='--verify: largest difference allowed, '
        'relative to the largest output magnitude')
    parser.add_argument('--cfg-options', nargs='+', action=DictAction,
                        help='override config settings, key=value')
    return parser.parse_args(argv)


def build(args):
    """The module to export and its example input."""
    cfg, scope, shape = load_traced_config(args.config, args.cfg_options,
                                           args.shape)
    model = build_config_model(cfg, init=args.checkpoint is None)
    if args.checkpoint:
        from mmhgw.engine import load_fitting_weights
        load_fitting_weights(model, args.checkpoint)
    model.eval()  # stock ResNet.train() returns None: no chaining
    module = (model.backbone if args.backbone_only else TensorModeModel(
        model, scope, shape))
    return module, torch.randn(1, 3, *shape)


def compare(outputs, expected, tolerance):
    """Largest absolute difference per output, relative to the largest
    output magnitude; raises when one exceeds ``tolerance``."""
    if len(outputs) != len(expected):
        raise RuntimeError(f'onnxruntime gave {len(outputs)} outputs, '
                           f'PyTorch {len(expected)}')
    errors = []
    for i, (a, b) in enumerate(zip(outputs, expected)):
        if tuple(a.shape) != tuple(b.shape):
            raise RuntimeError(f'output {i}: onnxruntime shape '
                               f'{tuple(a.shape)}, PyTorch {tuple(b.shape)}')
        scale = b.abs().max().clamp_min(1e-12)
        errors.append(float((a.to(b.dtype) - b).abs().max() / scale))
    worst = max(errors, default=0.0)
    if not worst <= tolerance:
        raise RuntimeError(f'onnxruntime differs from PyTorch by {worst:.3g} '
                           f'(relative to the output magnitude; tolerance '
                           f'{tolerance:g})')
    return errors


def main(argv=None):
    args = parse_args(argv)
    module, image = build(args)
    shape = tuple(image.shape[-2:])
    with torch.no_grad():
        expected = module(image)
    if torch.is_tensor(expected):
        expected = (expected, )
    expected = [t for t in expected if torch.is_tensor(t)]
    try:
        proto = export_onnx(module, (image, ), args.out,
                            opset_version=args.opset, input_names=['image'])
    except NotExportableError as err:
        raise NotExportableError(
            f'{args.config}: {err}. Detectors whose tensor mode runs '
            f'proposals and RoI ops (two-stage ones such as Mask R-CNN) '
            f'cannot be exported whole: export --backbone-only, or use '
            f'mmdeploy') from err
    print(f'Wrote {args.out}: opset {args.opset}, {len(proto.graph.node)} '
          f'nodes, input image 1 x 3 x {shape[0]} x {shape[1]}, '
          f'{len(expected)} outputs')
    errors = None
    if args.verify:
        errors = compare(run_onnx(args.out, (image, )), expected,
                         args.tolerance)
        print(f'onnxruntime matches PyTorch: largest relative difference '
              f'{max(errors):.3g} (tolerance {args.tolerance:g})')
    return proto, errors


if __name__ == '__main__':
    main()
