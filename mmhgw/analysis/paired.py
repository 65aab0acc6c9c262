"""Paired comparisons of trained models: one value per seed, differences
taken seed by seed, a Student-t interval of their mean."""
import statistics


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
