"""Evaluate a checkpoint on a config's test set with mmengine's Runner.

    python tools/test.py CONFIG CHECKPOINT [--work-dir DIR] [--out OUT]
        [--show] [--show-dir DIR] [--tta] ... (the stock test scripts' options)
"""
import argparse
import json

from mmengine.runner import Runner

import mmhgw  # noqa: F401  (registers mmhgw; safe checkpoint loading)
from mmhgw.config_utils import add_runner_args, config_from_args
from mmhgw.engine.cpu_dist import finish_distributed, prepare_cpu_distributed
from mmhgw.engine.test_options import (add_test_options, apply_test_options,
                                       write_test_outputs)


def parse_args():
    parser = argparse.ArgumentParser(description='Test a checkpoint')
    parser.add_argument('config', help='test config file path')
    parser.add_argument('checkpoint', help='checkpoint file')
    parser.add_argument('--metrics-out',
                        help='also write the metrics to this JSON file')
    add_runner_args(parser)
    add_test_options(parser)
    return parser.parse_args()


def main():
    args = parse_args()
    cfg = config_from_args(args)
    prepare_cpu_distributed(cfg)
    cfg.load_from = args.checkpoint
    apply_test_options(cfg, args)
    runner = Runner.from_cfg(cfg)
    metrics = runner.test()
    print(metrics)
    if args.metrics_out:
        with open(args.metrics_out, 'w') as f:
            json.dump(metrics, f, indent=2)
    write_test_outputs(metrics, args)
    finish_distributed()


if __name__ == '__main__':
    main()
