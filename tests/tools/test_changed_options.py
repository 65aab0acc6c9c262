"""tools/analysis/changed_options.py: trained models tested as configured
and with options changed at test time."""
import json

import pytest

from mmhgw.config_utils import checkpoint_metrics
from tools.analysis.changed_options import main

#: Sliding-window inference in 32x32 windows instead of the whole image.
SLIDE = {
    'model.test_cfg.mode': 'slide', 'model.test_cfg.crop_size': (32, 32),
    'model.test_cfg.stride': (16, 16)
}
SLIDE_ARGS = [f'{k}={v}'.replace(' ', '') for k, v in SLIDE.items()]


def test_scores_equal_the_config_changed_so(seg_config, seg_checkpoint,
                                            seg_checkpoint_copy, tmp_path):
    out = tmp_path / 'changed.json'
    main([
        '--model', 'hgw', seg_config, seg_checkpoint, '--model', 'hgw',
        seg_config, seg_checkpoint_copy, '--changed', *SLIDE_ARGS, '--name',
        'slide', '--metric', 'mIoU', 'aAcc', '--out',
        str(out)
    ])
    result = json.loads(out.read_text())
    assert result['changes'] == ['slide'] and 'partial' not in result
    scores = result['results']['hgw']
    for change, option in [('trained', {}), ('slide', SLIDE)]:
        plain = checkpoint_metrics(seg_config, seg_checkpoint, option)
        for metric in ('mIoU', 'aAcc'):
            assert scores[change][metric] == pytest.approx([plain[metric]] *
                                                           2), (change, metric)
    assert scores['slide'] != scores['trained']


@pytest.mark.parametrize('extra, named', [
    (['--name', 'trained'], '--name trained'),
    (['--cfg-options', SLIDE_ARGS[0]], '--changed and --cfg-options both set'),
])
def test_bad_arguments_are_named(seg_config, seg_checkpoint, tmp_path, capsys,
                                 extra, named):
    with pytest.raises(SystemExit):
        main([
            '--model', 'a', seg_config, seg_checkpoint, '--changed',
            *SLIDE_ARGS, *extra, '--out',
            str(tmp_path / 'x.json')
        ])
    assert named in capsys.readouterr().err
