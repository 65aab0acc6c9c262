import pytest

from mmhgw.benchmarking import reproducing_command


@pytest.mark.parametrize('argv', [
    ['bench/bench_layer.py', '--repeats', '7', '--json', '/tmp/out.json'],
    ['bench/bench_layer.py', '--json=/tmp/out.json', '--repeats', '7'],
])
def test_reported_command_leaves_out_where_results_were_saved(argv):
    assert reproducing_command(argv) == \
        'python bench/bench_layer.py --repeats 7'


def test_reported_command_keeps_every_measuring_option():
    argv = ['bench/bench_models.py', '--group', 'mask-rcnn', '--rounds', '5']
    assert reproducing_command(argv) == 'python ' + ' '.join(argv)


def test_bench_cases_are_parsed_and_bad_ones_named(capsys):
    import argparse
    import os.path as osp
    import sys
    sys.path.insert(
        0, osp.join(osp.dirname(osp.dirname(osp.dirname(__file__))), 'bench'))
    try:
        from bench_layer import add_cases_arg
    finally:
        sys.path.pop(0)
    parser = argparse.ArgumentParser()
    add_cases_arg(parser, [(8, 1, 4, 4)])
    assert parser.parse_args([]).cases == [(8, 1, 4, 4)]
    assert parser.parse_args(['--cases', '16x2x3x5,4X1X2X2']).cases == \
        [(16, 2, 3, 5), (4, 1, 2, 2)]
    for bad in ('16x2x3', '16x0x3x3', 'axbxcxd'):
        with pytest.raises(SystemExit):
            parser.parse_args(['--cases', bad])
        assert '--cases: comma-separated CxBxHxW' in capsys.readouterr().err
