"""Evaluate a checkpoint on a config's test set with mmengine's Runner.

    python tools/test.py CONFIG CHECKPOINT [--work-dir DIR]
"""
import argparse
import json
import os
import os.path as osp

from mmengine.config import Config, DictAction
from mmengine.runner import Runner

import mmhgw  # noqa: F401  (registers mmhgw; safe checkpoint loading)
from mmhgw.engine.cpu_dist import prepare_cpu_distributed


def parse_args():
    parser = argparse.ArgumentParser(description='Test a checkpoint')
    parser.add_argument('config', help='test config file path')
    parser.add_argument('checkpoint', help='checkpoint file')
    parser.add_argument('--work-dir', help='where logs and metrics go')
    parser.add_argument('--metrics-out',
                        help='also write the metrics to this JSON file')
    parser.add_argument('--cfg-options', nargs='+', action=DictAction,
                        help='override config settings, key=value')
    parser.add_argument('--launcher', default='none',
                        choices=['none', 'pytorch', 'slurm', 'mpi'])
    parser.add_argument('--local_rank', '--local-rank', type=int, default=0)
    args = parser.parse_args()
    os.environ.setdefault('LOCAL_RANK', str(args.local_rank))
    return args


def main():
    args = parse_args()
    cfg = Config.fromfile(args.config)
    cfg.launcher = args.launcher
    if args.cfg_options:
        cfg.merge_from_dict(args.cfg_options)
    if args.work_dir:
        cfg.work_dir = args.work_dir
    elif cfg.get('work_dir') is None:
        cfg.work_dir = osp.join('./work_dirs',
                                osp.splitext(osp.basename(args.config))[0])
    prepare_cpu_distributed(cfg)
    cfg.load_from = args.checkpoint
    runner = Runner.from_cfg(cfg)
    metrics = runner.test()
    print(metrics)
    if args.metrics_out:
        with open(args.metrics_out, 'w') as f:
            json.dump(metrics, f, indent=2)


if __name__ == '__main__':
    main()
