"""Trained models tested as configured and with some config options
changed at test time, paired model by model.

For each ``--model`` (a config, with ``--cfg-options`` for every model, and
a checkpoint) the test set is scored as configured and with ``--changed``
merged on top (e.g. a test pipeline that keeps the aspect ratio, another
test mode). Only what the test reads may change: the weights load as
trained. Writes JSON (after each model too, marked ``partial``) and prints a
markdown table (mean as configured, the change's paired difference, its
interval and range)::

    python tools/analysis/changed_options.py \\
        --model hgw CONFIG CHECKPOINT [--model ...] \\
        --changed test_dataloader.dataset.pipeline.1.keep_ratio=True \\
        [--name keep-ratio] [--metric mIoU] [--cfg-options k=v ...] \\
        --out changed.json
"""
import argparse

from mmhgw.analysis.paired import changes_table, score_changes, write_changes
from mmhgw.config_utils import (add_model_args, add_score_args,
                                check_model_args, check_unique)


def compare(models, changed: dict, name: str, metrics, options,
            save=None) -> dict:
    """``{label: {'trained' | name: {metric: [score per model]}}}``
    (:func:`mmhgw.analysis.paired.score_changes`)."""
    from mmhgw.config_utils import checkpoint_metrics

    def score(label, config, checkpoint, change):
        extra = changed if change == name else {}
        return checkpoint_metrics(config, checkpoint,
                                  {**(options or {}), **extra})

    return score_changes(models, [name], metrics, score, save)


def parse_args(argv=None):
    from mmengine.config import DictAction
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_model_args(parser)
    parser.add_argument('--changed', nargs='+', action=DictAction,
                        required=True,
                        help='key=value options of the changed test')
    parser.add_argument(
        '--name', default='changed',
        help='what the change is called in the table and '
        'JSON (default: changed)')
    add_score_args(parser)
    args = parser.parse_args(argv)
    check_model_args(parser, args.model)
    check_unique(parser, args, 'metric')
    if args.name == 'trained':
        parser.error('--name trained is taken by the models as configured')
    overlap = sorted(set(args.changed) & set(args.cfg_options or {}))
    if overlap:
        parser.error(f'--changed and --cfg-options both set {overlap}: '
                     f'give each key to one of them')
    return args


def main(argv=None):
    args = parse_args(argv)
    results = compare(
        args.model, args.changed, args.name, args.metric, args.cfg_options,
        save=lambda done: write_changes(args.out, [args.name], done, True))
    write_changes(args.out, [args.name], results, False)
    print(changes_table(results, [args.name], args.metric))
    print(f'written to {args.out}')


if __name__ == '__main__':
    main()
