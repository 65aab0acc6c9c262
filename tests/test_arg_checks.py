import pytest

from mmhgw.arg_checks import check_choice, check_int


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
