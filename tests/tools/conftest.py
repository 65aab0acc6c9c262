"""Fixtures of the tests of the analysis tools."""
import pytest
import torch

from mmhgw.config_utils import build_config_model, load_offline_config


@pytest.fixture
def seg_config(reduced_seg_config, tmp_path):
    """A small HGWCaps UNet config on two generated images."""
    return str(reduced_seg_config(tmp_path, num_train=2, num_val=2))


@pytest.fixture
def seg_checkpoint(seg_config, tmp_path):
    """A checkpoint of ``seg_config``'s model, freshly initialised."""
    model = build_config_model(load_offline_config(seg_config))
    path = tmp_path / 'model.pth'
    torch.save(dict(state_dict=model.state_dict(), meta={}), path)
    return str(path)
