"""Train a detector or segmentor from a config with mmengine's Runner.

Works for mmdet and mmseg configs alike: the Runner reads ``default_scope``.

    python tools/train.py CONFIG [--work-dir DIR] [--resume [CKPT]] [--amp]
"""
import argparse

from mmengine.runner import Runner

import mmhgw  # noqa: F401  (registers mmhgw; safe checkpoint loading)
from mmhgw.config_utils import add_runner_args, config_from_args
from mmhgw.engine.cpu_dist import finish_distributed, prepare_cpu_distributed
from mmhgw.engine.preflight import check_weight_sources


def parse_args():
    parser = argparse.ArgumentParser(description='Train a model')
    parser.add_argument('config', help='train config file path')
    parser.add_argument(
        '--resume', nargs='?', type=str, const='auto',
        help='resume from this checkpoint; without a path, from the latest '
        'checkpoint in the work dir')
    parser.add_argument('--amp', action='store_true',
                        help='automatic mixed precision training')
    add_runner_args(parser)
    return parser.parse_args()


def main():
    args = parse_args()
    cfg = config_from_args(args)
    check_weight_sources(cfg)
    prepare_cpu_distributed(cfg)
    if args.amp:
        cfg.optim_wrapper.type = 'AmpOptimWrapper'
        cfg.optim_wrapper.setdefault('loss_scale', 'dynamic')
    if args.resume == 'auto':
        cfg.resume, cfg.load_from = True, None
    elif args.resume is not None:
        cfg.resume, cfg.load_from = True, args.resume
    runner = Runner.from_cfg(cfg)
    runner.train()
    finish_distributed()


if __name__ == '__main__':
    main()
