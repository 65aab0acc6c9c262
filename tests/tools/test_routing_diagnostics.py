"""tools/analysis/routing_diagnostics.py on a reduced HGWCaps UNet."""
import pytest

from mmhgw.config_utils import load_offline_config
from tools.analysis.routing_diagnostics import diagnose


@pytest.fixture
def cfg(reduced_seg_config, tmp_path):
    return load_offline_config(
        str(reduced_seg_config(tmp_path, num_train=4, num_val=1)))


@pytest.mark.parametrize('scope', ['layer', 'network'])
def test_statistics_and_where_e_reaches(cfg, scope):
    cfg.model.backbone.hgw_cfg.reg_scope = scope
    result = diagnose(cfg, batches=1, beta=0.5)
    assert len(result['layers']) == 4  # deepest encoder and decoder blocks
    for s in result['layers'].values():
        assert 0 <= s['row_entropy'] <= 1
        assert 0 < s['active_types'] <= s['out_types']
        assert 0 <= s['saturated_cross_cost'] <= 1
        assert s['regulariser'] > 0
    grads = result['gradients']
    caps = grads['capsule layers']
    assert caps['task + E'] != pytest.approx(caps['task'])
    # The first encoder stage lies before every capsule layer: E reaches
    # it only through the layers' inputs.
    first = grads['backbone (encoder.0)']
    if scope == 'layer':
        assert first['task + E'] == pytest.approx(first['task'], rel=1e-5)
    else:
        assert first['task + E'] != pytest.approx(first['task'], rel=1e-3)
