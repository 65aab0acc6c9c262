"""What trained HGWCaps segmentors take from their routing: test metrics
with every capsule layer changed at test time.

For each ``--model`` (a config, with ``--cfg-options`` for every model, and
a checkpoint) the test set is scored as trained and with each change of
``--changes`` applied to every capsule layer (nothing else of the network
changes, and no weight):

- ``swap``: routed by the other plan (HGW routing for a model trained with
  uniform routing, the uniform plan ``p q^T`` for one trained with HGW);
- ``flat``: every activation 1 (the temperature made infinite), so that the
  routing reaches the output not at all and only the poses pass.

A drop under ``swap`` says the network relies on the activations of the
plan it was trained with; one under ``flat`` that it relies on the
activations at all. Writes JSON (after each model too, marked ``partial``,
so that an interrupted run keeps what it finished) and prints a markdown
table (mean over the models of one label, then each change's mean
difference to as trained, with its interval and range)::

    python tools/analysis/routing_knockout.py \\
        --model hgw CONFIG CHECKPOINT [--model hgw CONFIG CHECKPOINT ...] \\
        [--changes swap flat] [--metric mIoU sep/AUC] \\
        [--cfg-options k=v ...] --out knockout.json
"""
import argparse
import math

from mmhgw.analysis.paired import changes_table, score_changes, write_changes
from mmhgw.config_utils import add_model_args, add_score_args, check_model_args

#: Change -> what it does to one capsule layer.
CHANGES = {
    'swap': lambda layer: setattr(
        layer, 'routing', 'uniform' if layer.routing == 'hgw' else 'hgw'),
    'flat': lambda layer: setattr(layer, 'temperature', math.inf),
}


def capsule_layers_changed(change: str):
    """A ``change_model`` for :func:`mmhgw.config_utils.checkpoint_metrics`
    applying ``change`` to every capsule layer of the model."""

    def apply(model):
        from mmhgw.models.layers import HGWCaps
        layers = [m for m in model.modules() if isinstance(m, HGWCaps)]
        if not layers:
            raise ValueError('the model has no HGWCaps layer to change')
        for layer in layers:
            CHANGES[change](layer)

    return apply


def knockouts(models, changes, metrics, options, save=None) -> dict:
    """``{label: {change: {metric: [score per model]}}}``, ``'trained'``
    among the changes (:func:`mmhgw.analysis.paired.score_changes`)."""
    from mmhgw.config_utils import checkpoint_metrics

    def score(label, config, checkpoint, change):
        return checkpoint_metrics(
            config, checkpoint, options, change_model=None
            if change == 'trained' else capsule_layers_changed(change))

    return score_changes(models, changes, metrics, score, save)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_model_args(parser)
    parser.add_argument('--changes', nargs='+', choices=list(CHANGES),
                        default=list(CHANGES))
    add_score_args(parser)
    args = parser.parse_args(argv)
    check_model_args(parser, args.model)
    return args


def main(argv=None):
    args = parse_args(argv)
    results = knockouts(
        args.model, args.changes, args.metric, args.cfg_options,
        save=lambda done: write_changes(args.out, args.changes, done, True))
    write_changes(args.out, args.changes, results, False)
    print(changes_table(results, args.changes, args.metric))
    print(f'written to {args.out}')


if __name__ == '__main__':
    main()
