"""Paired comparisons of trained models: one value per seed, differences
taken seed by seed, a Student-t interval of their mean."""
import json
import os
import os.path as osp
import statistics


def mean_std(values):
    """``(mean, std)`` of ``values``: the sample standard deviation, 0 for
    one value; ``(None, None)`` for none. ``None`` entries (a metric a run
    did not give) are left out."""
    values = [v for v in values if v is not None]
    if not values:
        return None, None
    std = statistics.stdev(values) if len(values) > 1 else 0.0
    return statistics.fmean(values), std


def confidence_interval(values, level=0.95):
    """Student-t interval ``(low, high)`` of the mean of ``values`` (paired
    differences: one value per seed); None with fewer than two values."""
    if len(values) < 2:
        return None
    from scipy import stats
    mean = statistics.fmean(values)
    half = stats.t.ppf((1 + level) / 2, len(values) - 1) * \
        statistics.stdev(values) / len(values) ** 0.5
    return mean - half, mean + half


def fmt_interval(values, digits=2):
    """``mean [low, high]`` of paired differences; the verdict is in the
    sign of the interval (it excludes 0, or not)."""
    ci = confidence_interval(values)
    if ci is None:
        return 'n/a'
    return (f'{statistics.fmean(values):+.{digits}f} '
            f'[{ci[0]:+.{digits}f}, {ci[1]:+.{digits}f}]')


def record_scores(results: dict, label: str, change: str, scores: dict,
                  metrics) -> None:
    """Append a model's test ``scores`` of ``metrics`` under ``label`` and
    ``change`` (``'trained'`` or a change) in ``results``, the layout of
    :func:`changes_table`; a metric the test did not give raises
    ``KeyError`` naming ``--metric`` and what the test gave."""
    per_metric = results.setdefault(label, {}).setdefault(change, {})
    for metric in metrics:
        if metric not in scores:
            raise KeyError(f'--metric {metric}: the test gave '
                           f'{sorted(scores)}')
        per_metric.setdefault(metric, []).append(scores[metric])


def score_changes(models, changes, metrics, score, save=None) -> dict:
    """Each ``(label, config, checkpoint)`` of ``models`` scored as trained
    and under each of ``changes``: ``score(label, config, checkpoint,
    change)`` returns the test scores (``change`` is ``'trained'`` first).
    Returns
    ``{label: {'trained' or change: {metric: [score per model]}}}``, the
    layout of :func:`changes_table`; ``save(results)`` after each model, so
    that an interrupted run keeps the models it finished."""
    results = {}
    for label, config, checkpoint in models:
        for change in ['trained', *changes]:
            record_scores(results, label, change,
                          score(label, config, checkpoint, change), metrics)
        if save is not None:
            save(results)
    return results


def changes_table(results, changes, metrics) -> str:
    """Markdown: per label and metric, the mean as trained and each
    change's mean difference to it, paired by model, with its interval and
    range. ``results``: ``{label: {'trained' or change: {metric: [score
    per model]}}}``."""
    header = ['model', 'models', 'metric', 'as trained'
              ] + [f'{change} - as trained' for change in changes]
    lines = ['| ' + ' | '.join(header) + ' |', '|' + '---|' * len(header)]
    for label, per_change in results.items():
        for metric in metrics:
            trained = per_change['trained'][metric]
            cells = [
                label,
                str(len(trained)), metric, f'{statistics.fmean(trained):.2f}'
            ]
            for change in changes:
                diffs = [
                    a - b for a, b in zip(per_change[change][metric], trained)
                ]
                cells.append(f'{fmt_interval(diffs)} '
                             f'({min(diffs):+.2f} to {max(diffs):+.2f})')
            lines.append('| ' + ' | '.join(cells) + ' |')
    return '\n'.join(lines)


def write_changes(path: str, changes, results: dict, partial: bool):
    """Write :func:`changes_table`'s ``results`` and ``changes`` as JSON to
    ``path``, marked ``partial`` while models remain to be scored."""
    os.makedirs(osp.dirname(osp.abspath(path)), exist_ok=True)
    data = dict(changes=changes, results=results)
    if partial:
        data['partial'] = True
    with open(path, 'w') as f:
        json.dump(data, f, indent=2)
