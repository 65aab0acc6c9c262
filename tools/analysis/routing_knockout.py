"""What trained HGWCaps segmentors take from their routing: test metrics
with every capsule layer changed at test time.

For each ``--model`` (a config, with ``--cfg-options`` for every model, and
a checkpoint) the test set is scored as trained and with each change of
``--changes`` applied to every capsule layer (nothing else of the network
changes, and no weight):

- ``swap``: routed by the other plan (HGW routing for a model trained with
  uniform routing, the uniform plan ``p q^T`` for one trained with HGW);
- ``flat``: every activation 1 (the temperature made infinite), so that the
  routing reaches the output not at all and only the poses pass;
- ``fixed`` (asked for by name): routed by one plan per output type at
  every location, the layer's own plan averaged over ``--calib-batches``
  batches of the model's training data (seed 0), so that the plan no
  longer depends on the input (layers with the default pose only).

A drop under ``swap`` says the network relies on the activations of the
plan it was trained with; one under ``flat`` that it relies on the
activations at all; one under ``fixed`` that it relies on what the input
changes in the plan, beyond a grouping of components and parts that is
the same everywhere. Writes JSON (after each model too, marked ``partial``,
so that an interrupted run keeps what it finished) and prints a markdown
table (mean over the models of one label, then each change's mean
difference to as trained, with its interval and range)::

    python tools/analysis/routing_knockout.py \\
        --model hgw CONFIG CHECKPOINT [--model hgw CONFIG CHECKPOINT ...] \\
        [--changes swap flat fixed] [--calib-batches 4] \\
        [--metric mIoU sep/AUC] \\
        [--cfg-options k=v ...] --out knockout.json
"""
import argparse
import math

from mmhgw.analysis.paired import changes_table, score_changes, write_changes
from mmhgw.analysis.plans import route_at_plan
from mmhgw.config_utils import (add_model_args, add_score_args,
                                check_model_args, check_unique)

#: Change -> what it does to one capsule layer.
CHANGES = {
    'swap': lambda layer, plan: setattr(
        layer, 'routing', 'uniform' if layer.routing == 'hgw' else 'hgw'),
    'flat': lambda layer, plan: setattr(layer, 'temperature', math.inf),
    'fixed': lambda layer, plan: route_at_plan(layer, plan),
}
#: The changes run when ``--changes`` is not given.
DEFAULT_CHANGES = ['swap', 'flat']


def capsule_layers_changed(change: str, plans=None):
    """A ``change_model`` for :func:`mmhgw.config_utils.checkpoint_metrics`
    applying ``change`` to every capsule layer of the model; ``fixed``
    takes each layer's plan from ``plans`` ({layer name: plan},
    :func:`mmhgw.analysis.plans.mean_plans`)."""

    def apply(model):
        from mmhgw.models.layers import HGWCaps
        layers = {
            n: m
            for n, m in model.named_modules() if isinstance(m, HGWCaps)
        }
        if not layers:
            raise ValueError('the model has no HGWCaps layer to change')
        if change == 'fixed' and set(layers) != set(plans or {}):
            raise ValueError(
                f'fixed needs a plan for every capsule layer: the model has '
                f'{sorted(layers)}, the plans are for {sorted(plans or {})}')
        for name, layer in layers.items():
            CHANGES[change](layer, None if plans is None else plans[name])

    return apply


def calibration_plans(config, checkpoint, options, batches: int) -> dict:
    """Each capsule layer's mean plan over ``batches`` batches of the
    config's training data (seed 0) under the checkpoint's weights."""
    from mmengine.registry import init_default_scope
    from mmengine.runner import Runner, set_random_seed

    from mmhgw.analysis.plans import mean_plans
    from mmhgw.config_utils import (build_config_model, load_offline_config,
                                    merge_cfg_options)
    from mmhgw.engine import load_fitting_weights
    cfg = load_offline_config(config)
    merge_cfg_options(cfg, options)
    init_default_scope(cfg.get('default_scope', 'mmengine'))
    model = build_config_model(cfg, init=False)
    load_fitting_weights(model, checkpoint)
    model.eval()
    set_random_seed(0)
    loader = Runner.build_dataloader(cfg.train_dataloader, seed=0)
    return mean_plans(model, (b for _, b in zip(range(batches), loader)))


def knockouts(models, changes, metrics, options, save=None,
              calib_batches=4) -> dict:
    """``{label: {change: {metric: [score per model]}}}``, ``'trained'``
    among the changes (:func:`mmhgw.analysis.paired.score_changes`)."""
    from mmhgw.config_utils import checkpoint_metrics

    def score(label, config, checkpoint, change):
        plans = (calibration_plans(config, checkpoint, options, calib_batches)
                 if change == 'fixed' else None)
        return checkpoint_metrics(
            config, checkpoint, options, change_model=None
            if change == 'trained' else capsule_layers_changed(change, plans))

    return score_changes(models, changes, metrics, score, save)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_model_args(parser)
    parser.add_argument('--changes', nargs='+', choices=list(CHANGES),
                        default=DEFAULT_CHANGES)
    parser.add_argument('--calib-batches', type=int, default=4,
                        help='training batches the fixed plans average')
    add_score_args(parser)
    args = parser.parse_args(argv)
    check_model_args(parser, args.model)
    check_unique(parser, args, 'changes', 'metric')
    return args


def main(argv=None):
    args = parse_args(argv)
    if args.calib_batches < 1:
        raise SystemExit(f'--calib-batches must be at least 1, got '
                         f'{args.calib_batches}')
    results = knockouts(
        args.model, args.changes, args.metric, args.cfg_options,
        save=lambda done: write_changes(args.out, args.changes, done, True),
        calib_batches=args.calib_batches)
    write_changes(args.out, args.changes, results, False)
    print(changes_table(results, args.changes, args.metric))
    print(f'written to {args.out}')


if __name__ == '__main__':
    main()
