"""Trained models tested as trained and with their BN running statistics
recomputed over training batches under the final weights.

For each ``--model`` (a config, with ``--cfg-options`` for every model, and
a checkpoint), every BN layer that trains its statistics gets the plain
average over ``--num-batches`` batches of the config's training loader
(:func:`mmhgw.engine.recompute_bn_statistics`, what ``RecomputeBNHook``
does at the end of a run) and the test set is scored before and after. A
gain says the statistics the model was trained with lag its weights.
Writes JSON (after each model too, marked ``partial``) and prints a
markdown table (mean as trained, the recomputation's paired difference)::

    python tools/analysis/recompute_bn.py \\
        --model hgw CONFIG CHECKPOINT [--model ...] [--num-batches 100] \\
        [--metric mIoU] [--save-dir DIR] [--cfg-options k=v ...] \\
        --out recomputed.json

``--save-dir`` keeps each recomputed checkpoint as
``DIR/<label>_<n>.pth``, to test or deploy with the stock tools.
"""
import argparse
import os.path as osp
import tempfile

from mmhgw.analysis.paired import changes_table, score_changes, write_changes
from mmhgw.config_utils import (add_model_args, add_score_args,
                                check_model_args, check_unique)

CHANGE = 'recomputed-bn'


def recomputed_checkpoint(config: str, checkpoint: str, out: str,
                          num_batches: int, options=None, seed: int = 0):
    """Write to ``out`` the checkpoint ``checkpoint`` with its BN
    statistics recomputed over ``num_batches`` of ``config``'s training
    batches (drawn with ``seed``); returns the number of BN layers set."""
    import torch
    from mmengine.runner import Runner

    from mmhgw.config_utils import (build_config_model, load_offline_config,
                                    merge_cfg_options)
    from mmhgw.engine import load_fitting_weights, recompute_bn_statistics
    from mmhgw.engine.hooks.bn_statistics import statistics_loader
    cfg = load_offline_config(config)
    merge_cfg_options(cfg, options)
    model = build_config_model(cfg, init=False)
    saved = load_fitting_weights(model, checkpoint)
    loader_cfg = dict(cfg.train_dataloader, num_workers=0,
                      persistent_workers=False)
    loader_cfg.pop('prefetch_factor', None)
    train_loader = Runner.build_dataloader(loader_cfg, seed=seed)
    loader = statistics_loader(train_loader, seed=seed)
    count = recompute_bn_statistics(model, loader, num_batches)
    if count == 0:
        raise ValueError(f'{config}: the model has no BN layer that trains '
                         f'its running statistics')
    saved = dict(saved) if 'state_dict' in saved else dict(state_dict=saved)
    saved['state_dict'] = model.state_dict()
    saved['meta'] = dict(
        saved.get('meta') or {},
        bn_recomputed=dict(num_batches=num_batches, seed=seed,
                           source=checkpoint))
    torch.save(saved, out)
    return count


def compare(models, metrics, options, num_batches, save_dir=None,
            save=None) -> dict:
    """``{label: {'trained' | 'recomputed-bn': {metric: [score per
    model]}}}`` (:func:`mmhgw.analysis.paired.score_changes`)."""
    from mmhgw.config_utils import checkpoint_metrics
    seen = {}
    with tempfile.TemporaryDirectory() as tmp:

        def score(label, config, checkpoint, change):
            if change == CHANGE:
                seen[label] = seen.get(label, -1) + 1
                out = osp.join(save_dir or tmp, f'{label}_{seen[label]}.pth')
                recomputed_checkpoint(config, checkpoint, out, num_batches,
                                      options)
                checkpoint = out
            return checkpoint_metrics(config, checkpoint, options)

        return score_changes(models, [CHANGE], metrics, score, save)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_model_args(parser)
    parser.add_argument('--num-batches', type=int, default=100,
                        help='training batches to average over')
    parser.add_argument('--save-dir',
                        help='keep the recomputed checkpoints here')
    add_score_args(parser)
    args = parser.parse_args(argv)
    check_model_args(parser, args.model)
    check_unique(parser, args, 'metric')
    if args.num_batches < 1:
        parser.error(f'--num-batches must be >= 1, got {args.num_batches}')
    if args.save_dir is not None and not osp.isdir(args.save_dir):
        parser.error(f'--save-dir {args.save_dir} is not a directory')
    return args


def main(argv=None):
    args = parse_args(argv)
    results = compare(
        args.model, args.metric, args.cfg_options, args.num_batches,
        args.save_dir,
        save=lambda done: write_changes(args.out, [CHANGE], done, True))
    write_changes(args.out, [CHANGE], results, False)
    print(changes_table(results, [CHANGE], args.metric))
    print(f'written to {args.out}')


if __name__ == '__main__':
    main()
