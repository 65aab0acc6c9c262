"""tools/analysis/recompute_bn.py: trained models tested with their BN
statistics recomputed over training batches."""
import json

import pytest
import torch

from mmhgw.config_utils import checkpoint_metrics
from tools.analysis.recompute_bn import main


def test_recomputed_checkpoint_changes_only_bn_statistics(
        seg_config, seg_checkpoint, tmp_path):
    out = tmp_path / 'bn.json'
    saved = tmp_path / 'saved'
    saved.mkdir()
    main([
        '--model', 'hgw', seg_config, seg_checkpoint, '--num-batches', '2',
        '--metric', 'mIoU', 'aAcc', '--save-dir',
        str(saved), '--out',
        str(out)
    ])
    result = json.loads(out.read_text())
    assert result['changes'] == ['recomputed-bn'] and 'partial' not in result
    scores = result['results']['hgw']
    original = torch.load(seg_checkpoint, weights_only=False)['state_dict']
    recomputed = torch.load(saved / 'hgw_0.pth', weights_only=False)
    assert recomputed['meta']['bn_recomputed']['num_batches'] == 2
    changed = {
        k
        for k, v in original.items()
        if not torch.equal(v, recomputed['state_dict'][k])
    }
    assert changed and all(
        k.endswith(('running_mean', 'running_var')) for k in changed)
    for change, path in (('trained', seg_checkpoint),
                         ('recomputed-bn', str(saved / 'hgw_0.pth'))):
        plain = checkpoint_metrics(seg_config, path)
        for metric in ('mIoU', 'aAcc'):
            assert scores[change][metric] == [pytest.approx(plain[metric])]


def test_bad_arguments_are_named(seg_config, seg_checkpoint, tmp_path, capsys):
    for extra, named in [(['--num-batches', '0'], '--num-batches'),
                         (['--save-dir', str(tmp_path / 'no')], '--save-dir')]:
        with pytest.raises(SystemExit):
            main([
                '--model', 'a', seg_config, seg_checkpoint, *extra, '--out',
                str(tmp_path / 'x.json')
            ])
        assert named in capsys.readouterr().err
