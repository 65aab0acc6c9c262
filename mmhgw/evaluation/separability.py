"""Threshold-free scores of a segmentor's class probabilities."""
from typing import Optional, Sequence

import torch
from mmengine.evaluator import BaseMetric
from mmengine.registry import METRICS

from mmhgw.arg_checks import check_int


@METRICS.register_module()
class SeparabilityMetric(BaseMetric):
    """How well the predicted probability of one class separates its pixels
    from the rest, independent of the decision threshold.

    ``mIoU`` scores the arg-max labels, so a model whose probabilities rank
    pixels well but sit on the wrong side of 1/2 everywhere scores as if it
    had learned nothing (one class predicted everywhere). This metric reads
    the probabilities themselves (softmax of ``seg_logits``, the class
    ``positive_index`` against all others) on the labelled pixels
    (``ignore_index`` left out):

    - ``AUC``: the probability that a pixel of the class has a higher score
      than a pixel of the rest (area under the ROC curve; ties count half);
    - ``CE``: the mean binary cross-entropy of the probabilities, in nats;
    - ``best_mIoU``: the two-class mean IoU at the threshold that maximises
      it on these very pixels: an upper bound on what re-thresholding alone
      could reach, for diagnosis, not a test score.

    Probabilities are accumulated in ``bins`` equal histogram bins per
    class, so memory does not grow with the test set and ranks within one
    bin count as ties: with the default 4096 bins AUC is exact to about
    1/4096 of the pairs in a bin.

    Args:
        positive_index: the class whose pixels are separated from the rest.
        ignore_index: the label of unlabelled pixels.
        bins: histogram bins over [0, 1]; an int >= 2.
        collect_device, prefix: as mmengine's ``BaseMetric``.
    """

    default_prefix = 'sep'

    def __init__(self, positive_index: int = 1, ignore_index: int = 255,
                 bins: int = 4096, collect_device: str = 'cpu',
                 prefix: Optional[str] = None, **kwargs):
        super().__init__(collect_device=collect_device, prefix=prefix)
        check_int('bins', bins, 2)
        check_int('positive_index', positive_index, 0)
        self.positive_index = positive_index
        self.ignore_index = ignore_index
        self.bins = bins

    def process(self, data_batch, data_samples: Sequence[dict]) -> None:
        for sample in data_samples:
            if 'seg_logits' not in sample:
                raise KeyError(
                    'SeparabilityMetric needs the seg_logits of each '
                    'prediction (mmseg segmentors return them from predict)')
            logits = sample['seg_logits']['data'].float()  # [C, H, W]
            if logits.shape[0] <= self.positive_index:
                raise ValueError(
                    f'SeparabilityMetric: positive_index='
                    f'{self.positive_index} but the model predicts '
                    f'{logits.shape[0]} classes')
            label = sample['gt_sem_seg']['data'].squeeze(0).to(logits.device)
            if logits.shape[0] == 1:
                # One output channel: a sigmoid score, as mmseg thresholds
                # it for binary segmentation.
                prob = logits[0].sigmoid()
            else:
                prob = logits.softmax(0)[self.positive_index]
            keep = label != self.ignore_index
            prob, positive = prob[keep], label[keep] == self.positive_index
            self.results.append(self._histograms(prob, positive))

    def _histograms(self, prob, positive) -> dict:
        """Per-class histograms of the scores, and the summed
        cross-entropy (exact, not binned)."""
        index = (prob * self.bins).long().clamp_(0, self.bins - 1)
        hist = torch.zeros(2, self.bins, dtype=torch.float64)
        hist.index_put_((positive.long().cpu(), index.cpu()),
                        torch.ones(len(index), dtype=torch.float64),
                        accumulate=True)
        p = prob.double().clamp(1e-12, 1 - 1e-12)
        ce = -torch.where(positive, p.log(), (1 - p).log()).sum()
        return dict(hist=hist, ce=ce.item())

    def compute_metrics(self, results: list) -> dict:
        hist = sum(r['hist'] for r in results)
        neg, pos = hist[0], hist[1]
        n_neg, n_pos = neg.sum().item(), pos.sum().item()
        if n_neg == 0 or n_pos == 0:
            raise ValueError(
                f'SeparabilityMetric: the labelled pixels hold '
                f'{int(n_pos)} of class {self.positive_index} and '
                f'{int(n_neg)} of the rest; both are needed')
        # AUC = P(score_pos > score_neg) + P(equal) / 2, by bins.
        below = torch.cumsum(neg, 0) - neg
        auc = ((pos * (below + neg / 2)).sum() / (n_pos * n_neg)).item()
        # Predicted positive at threshold k: the bins from k up (k = bins:
        # nothing predicted positive).
        zero = hist.new_zeros(1)
        tp = torch.cat(
            [torch.flip(torch.cumsum(torch.flip(pos, [0]), 0), [0]), zero])
        fp = torch.cat(
            [torch.flip(torch.cumsum(torch.flip(neg, [0]), 0), [0]), zero])
        fn, tn = n_pos - tp, n_neg - fp
        iou_pos = tp / (tp + fp + fn)
        iou_neg = tn / (tn + fn + fp)
        miou = (iou_pos + iou_neg) / 2
        ce = sum(r['ce'] for r in results) / (n_pos + n_neg)
        return dict(AUC=100 * auc, CE=ce, best_mIoU=100 * miou.max().item())
