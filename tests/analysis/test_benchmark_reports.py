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
