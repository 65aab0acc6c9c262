import math
import re

import numpy as np
import pytest

from mmhgw.arg_checks import (AT_LEAST_0, POSITIVE, UNIT, check_choice,
                              check_int, check_number, check_unit)


def test_an_allowed_value_passes_and_others_are_named():
    check_choice('routing', 'hgw', ('hgw', 'uniform'))
    with pytest.raises(
            ValueError, match=r"routing must be one of \('hgw', 'uniform'\), "
            r"got 'HGW'"):
        check_choice('routing', 'HGW', ('hgw', 'uniform'))


@pytest.mark.parametrize('value, minimum', [(1, 1), (0, 0), (7, 2)])
def test_ints_at_the_minimum_or_above_pass(value, minimum):
    check_int('n', value, minimum)


@pytest.mark.parametrize('value', [0, -1, 2.0, '3', True, None])
def test_other_values_are_refused_by_name(value):
    with pytest.raises(ValueError, match=f'n must be an int >= 1, got '
                       f'{value!r}'):
        check_int('n', value)


def test_optional_takes_none_and_says_so():
    check_int('interval', None, optional=True)
    with pytest.raises(ValueError,
                       match='interval must be None or an int >= 1, got 0'):
        check_int('interval', 0, optional=True)


@pytest.mark.parametrize('bounds, inside, outside', [
    (UNIT, [0, 0.5, 1, np.float32(0.25)], [-0.1, 1.5, math.nan, math.inf]),
    (POSITIVE, [1e-9, 3, 2.5], [0, -1, math.nan, math.inf]),
    (AT_LEAST_0, [0, 10], [-1e-9, math.nan, math.inf]),
])
def test_numbers_within_bounds_pass_and_others_are_named(
        bounds, inside, outside):
    for value in inside:
        check_number('x', value, bounds)
    for value in outside:
        with pytest.raises(ValueError,
                           match=f'x must be {re.escape(bounds[0])}, got '):
            check_number('x', value, bounds)


@pytest.mark.parametrize('value', ['0.5', True, None, [0.5]])
def test_values_that_are_not_numbers_are_named(value):
    with pytest.raises(
            ValueError,
            match=f'beta must be a number, got {re.escape(repr(value))}'):
        check_unit('beta', value)
