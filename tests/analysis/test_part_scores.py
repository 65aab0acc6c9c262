"""tools/analysis/part_scores.py: the scores of a model that tells the T
objects from the L objects, of one that cannot, and bad maps."""
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
