"""tools/analysis/part_scores.py: the scores of a model that tells the T
objects from the L objects, of one that cannot, and bad maps."""
import json

import numpy as np
import pytest

from tools.analysis.part_scores import arrangement_scores


def maps():
    objects = np.zeros((2, 6, 6), np.uint8)
    objects[:, 1:3, 1:3] = 1  # T
    objects[:, 3:5, 3:5] = 2  # L
    return objects


def test_a_model_that_tells_them_apart_and_one_that_cannot():
    objects = maps()
    sharp = np.where(objects == 1, 0.9, 0.1)
    scores = arrangement_scores(list(sharp), list(objects))
    assert scores['arrangement_auc'] == 1.0
    assert scores['T'] == pytest.approx(0.9)
    assert scores['L'] == pytest.approx(0.1)
    # Objects found, arrangement not: every object scores alike.
    blind = np.where(objects > 0, 0.7, 0.1)
    scores = arrangement_scores(list(blind), list(objects))
    assert scores['arrangement_auc'] == 0.5
    assert scores['T'] == scores['L'] == pytest.approx(0.7)
    assert scores['background'] == pytest.approx(0.1)
    # Ranked the wrong way round.
    assert arrangement_scores(list(1 - sharp),
                              list(objects))['arrangement_auc'] == 0.0


def test_bad_maps_are_refused():
    objects = maps()
    with pytest.raises(ValueError, match='the size of its object map'):
        arrangement_scores([np.zeros((6, 5))] * 2, list(objects))
    with pytest.raises(ValueError, match='no T or no L pixel'):
        arrangement_scores(list(np.zeros((2, 6, 6))),
                           list(np.where(objects == 2, 0, objects)))


def test_models_score_and_a_misfitting_checkpoint_is_refused(
        seg_config, seg_checkpoint, seg_checkpoint_copy, tmp_path, capsys):
    from mmhgw.datasets.synthetic import make_isic_arrangements
    from mmhgw.engine.hooks.checkpoint_fit import CheckpointMismatch
    from tools.analysis.part_scores import main
    data = str(tmp_path / 'Parts')
    make_isic_arrangements(data, num_train=1, num_val=2, size=(64, 64))
    out = tmp_path / 'scores.json'
    main([
        data, '--model', 'hgw', seg_config, seg_checkpoint, '--json',
        str(out)
    ])
    scores = json.loads(out.read_text())['hgw']
    assert 0 <= scores['arrangement_auc'] <= 1
    assert '| hgw |' in capsys.readouterr().out
    # The run's width given to another config: refused, not scored with
    # random weights where the checkpoint does not fit.
    with pytest.raises(CheckpointMismatch) as err:
        main([
            data, '--model', 'wide', seg_config, seg_checkpoint,
            '--cfg-options', 'model.decode_head.channels=24'
        ])
    assert str(err.value).startswith(f'{seg_checkpoint} does not fit')
    assert 'decode_head' in str(err.value)
    with pytest.raises(SystemExit):
        main([
            data, '--model', 'a', seg_config, seg_checkpoint, '--model', 'a',
            seg_config, seg_checkpoint_copy
        ])
    assert '--model labels must differ' in capsys.readouterr().err
