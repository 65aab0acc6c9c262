"""Evaluate a checkpoint on a config's test set with mmengine's Runner.

    python tools/test.py CONFIG CHECKPOINT [--work-dir DIR]
"""
import argparse
import json

from mmengine.runner import Runner

import mmhgw  # noqa: F401  (registers mmhgw; safe checkpoint loading)
from mmhgw.config_utils import add_runner_args, config_from_args
from mmhgw.engine.cpu_dist import finish_distributed, prepare_cpu_distributed


def parse_args():
    parser = argparse.ArgumentParser(description='Test a checkpoint')
    parser.add_argument('config', help='test config file path')
    parser.add_argument('checkpoint', help='checkpoint file')
    parser.add_argument('--metrics-out',
                        help='also write the metrics to this JSON file')
    add_runner_args(parser)
    return parser.parse_args()


def main():
    args = parse_args()
    cfg = config_from_args(args)
    prepare_cpu_distributed(cfg)
    cfg.load_from = args.checkpoint
    runner = Runner.from_cfg(cfg)
    metrics = runner.test()
    print(metrics)
    if args.metrics_out:
        with open(args.metrics_out, 'w') as f:
            json.dump(metrics, f, indent=2)
    finish_distributed()


if __name__ == '__main__':
    main()
