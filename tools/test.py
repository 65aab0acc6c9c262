"""Evaluate a checkpoint on a config's test set with mmengine's Runner.

    python tools/test.py CONFIG CHECKPOINT [--work-dir DIR] [--allow-partial]
        [--out OUT] [--show] [--show-dir DIR] [--tta] ... (the stock test
        scripts' options)

A checkpoint that does not fit the config's model (weights missing, left
over or of another shape) is refused: its metrics would be those of a
partly random model.
"""
import argparse
import json

from mmengine.runner import Runner

import mmhgw  # noqa: F401  (registers mmhgw; safe checkpoint loading)
from mmhgw.config_check import check_registry_types
from mmhgw.config_utils import add_runner_args, config_from_args
from mmhgw.engine.cpu_dist import finish_distributed, prepare_cpu_distributed
from mmhgw.engine.hooks import CheckpointFitHook
from mmhgw.engine.test_options import (add_test_options, apply_test_options,
                                       plain_metrics, write_test_outputs)


def parse_args():
    parser = argparse.ArgumentParser(description='Test a checkpoint')
    parser.add_argument('config', help='test config file path')
    parser.add_argument('checkpoint', help='checkpoint file')
    parser.add_argument('--metrics-out',
                        help='also write the metrics to this JSON file')
    parser.add_argument(
        '--allow-partial', action='store_true',
        help='evaluate even if the checkpoint leaves model weights unloaded '
        'or holds weights the model lacks (a warning lists them)')
    add_runner_args(parser)
    add_test_options(parser)
    return parser.parse_args()


def main():
    args = parse_args()
    cfg = config_from_args(args)
    check_registry_types(cfg, args.config)
    prepare_cpu_distributed(cfg)
    cfg.load_from = args.checkpoint
    apply_test_options(cfg, args)
    runner = Runner.from_cfg(cfg)
    runner.register_hook(
        CheckpointFitHook(args.checkpoint, 'test',
                          allow_partial=args.allow_partial))
    metrics = plain_metrics(runner.test())
    print(metrics)
    if args.metrics_out:
        with open(args.metrics_out, 'w') as f:
            json.dump(metrics, f, indent=2)
    write_test_outputs(metrics, args)
    del runner  # its DDP wrapper holds the process group
    finish_distributed()


if __name__ == '__main__':
    main()
