"""SeparabilityMetric against brute-force oracles."""
import math

import pytest
import torch

from mmhgw.evaluation import SeparabilityMetric


def samples(logits, labels):
    return [
        dict(seg_logits=dict(data=lg), gt_sem_seg=dict(data=lb[None]))
        for lg, lb in zip(logits, labels)
    ]


def brute_force(prob, positive):
    """AUC by all pairs, CE, and the best two-class mIoU over every
    threshold at a probability value."""
    p, n = prob[positive], prob[~positive]
    greater = (p[:, None] > n[None]).double().sum()
    equal = (p[:, None] == n[None]).double().sum()
    auc = (greater + equal / 2) / (len(p) * len(n))
    q = prob.double()
    ce = -torch.where(positive, q.log(), (1 - q).log()).mean()
    best = 0.0
    for t in torch.cat([prob.unique(), prob.new_ones(1) * 2]):
        pred = prob >= t
        ious = [((pred == c) & (positive == c)).sum().double() /
                ((pred == c) | (positive == c)).sum() for c in (True, False)]
        best = max(best, float(sum(ious)) / 2)
    return 100 * auc.item(), ce.item(), 100 * best


def test_matches_brute_force_on_quantised_scores():
    torch.manual_seed(0)
    bins = 64
    # Scores at bin centres: the binned answer must equal the exact one.
    logits, labels = [], []
    for _ in range(3):
        label = (torch.rand(9, 11) < 0.3).long()
        centre = (torch.randint(0, bins, (9, 11)) + 0.5) / bins
        centre = torch.where(label.bool(), centre.sqrt(), centre**2)
        centre = ((centre * bins).floor() + 0.5) / bins
        logit1 = torch.log(centre / (1 - centre))
        logits.append(torch.stack([torch.zeros_like(logit1), logit1]))
        labels.append(label)
    label = torch.stack(labels)
    label[0, 0, :3] = 255  # unlabelled pixels are left out
    metric = SeparabilityMetric(bins=bins)
    metric.dataset_meta = dict(classes=('bg', 'fg'))
    metric.process({}, samples(logits, label))
    result = metric.compute_metrics(metric.results)
    prob = torch.stack([lg.softmax(0)[1] for lg in logits])
    keep = label != 255
    auc, ce, best = brute_force(prob[keep], label[keep] == 1)
    assert result['AUC'] == pytest.approx(auc, abs=1e-9)
    assert result['CE'] == pytest.approx(ce, rel=1e-6)
    assert result['best_mIoU'] == pytest.approx(best, abs=1e-9)


def test_constant_prediction_that_ranks_well():
    # Every pixel called background (p < 1/2), yet the ranking is perfect:
    # AUC 100 and a threshold that separates the classes exactly.
    label = torch.tensor([[0, 0, 1, 1]])
    prob = torch.tensor([[0.1, 0.2, 0.3, 0.4]])
    logit = torch.log(prob / (1 - prob))
    metric = SeparabilityMetric()
    metric.process({}, samples([torch.stack([0 * logit, logit])], [label]))
    result = metric.compute_metrics(metric.results)
    assert result['AUC'] == 100 and result['best_mIoU'] == 100
    expected = -(math.log(0.9) + math.log(0.8) + math.log(0.3) +
                 math.log(0.4)) / 4
    assert result['CE'] == pytest.approx(expected, rel=1e-6)


def test_bad_input_is_named():
    with pytest.raises(ValueError, match='bins'):
        SeparabilityMetric(bins=1)
    with pytest.raises(ValueError, match='positive_index'):
        SeparabilityMetric(positive_index=-1)
    metric = SeparabilityMetric(positive_index=2)
    with pytest.raises(ValueError, match='positive_index=2'):
        metric.process({},
                       samples([torch.zeros(2, 2, 2)],
                               [torch.zeros(2, 2).long()]))
    with pytest.raises(KeyError, match='seg_logits'):
        metric.process({}, [dict(gt_sem_seg=dict(data=torch.zeros(1, 2)))])
    metric = SeparabilityMetric()
    metric.process({},
                   samples([torch.zeros(2, 2, 2)], [torch.ones(2, 2).long()]))
    with pytest.raises(ValueError, match='both are needed'):
        metric.compute_metrics(metric.results)


def test_builds_under_the_segmentation_scope():
    from mmengine.registry import init_default_scope
    from mmseg.registry import METRICS
    init_default_scope('mmseg')
    assert isinstance(METRICS.build(dict(type='SeparabilityMetric')),
                      SeparabilityMetric)
