import pytest

from mmhgw.analysis.paired import confidence_interval, fmt_interval, mean_std


def test_mean_std_sample_spread_and_missing_values():
    mean, std = mean_std([1.0, None, 3.0])  # None: a metric a run lacked
    assert mean == 2.0
    assert std == pytest.approx(2**0.5)  # sample (n - 1) deviation
    assert mean_std([5.0]) == (5.0, 0.0)
    assert mean_std([None]) == (None, None)
    assert mean_std([]) == (None, None)


def test_interval_needs_two_values():
    assert confidence_interval([1.0]) is None
    assert fmt_interval([1.0]) == 'n/a'
    assert fmt_interval([1.0, 1.0]) == '+1.00 [+1.00, +1.00]'
