"""Class capsules as an MMPretrain classification head."""
import copy
from typing import List, Optional, Tuple, Union

import torch
from mmcv.cnn import build_conv_layer
from mmengine.model import BaseModule
from torch import Tensor

from mmhgw.registry import CLS_MODELS

__all__ = []

#: Routing to the class capsules: the capsule layer's own defaults (32 input
#: types, paper eps) unless a config says otherwise.
DEFAULT_ROUTING_CFG = dict(type='HGWCaps')


def margin_loss(lengths: Tensor, target: Tensor, m_pos: float = 0.9,
                m_neg: float = 0.1, neg_weight: float = 0.5) -> Tensor:
    """Margin loss on capsule lengths (Sabour et al. 2017, Eq. 4), summed
    over classes and averaged over the batch.

    Args:
        lengths: [B, K] class capsule lengths in [0, 1].
        target: [B, K] target presence (one-hot, or soft for mixup).
    """
    pos = target * (m_pos - lengths).clamp(min=0).pow(2)
    neg = (1 - target) * (lengths - m_neg).clamp(min=0).pow(2)
    return (pos + neg_weight * neg).sum(1).mean()


if CLS_MODELS is not None:

    @CLS_MODELS.register_module()
    class ClassCapsuleHead(BaseModule):
        """One capsule per class, routed from the pooled capsules by an HGW
        capsule layer (a 1x1 ``HGWCaps`` on the ``[B, C, 1, 1]`` pooled map:
        ``in_types`` input capsules, one output type per class). The class
        capsules' lengths, in [0, 1], are the class scores: the best-aligned
        class has length 1 (the layer's activation, see ``HGWCaps``), and
        the margin loss pulls the true class above ``m_pos`` and the others
        below ``m_neg``.

        Implements MMPretrain's head interface (``loss``, ``predict``,
        ``forward`` giving the scores), so ``ImageClassifier`` and its
        ``Accuracy`` metric use it unchanged.

        Args:
            num_classes: number of classes (output capsule types).
            in_channels: channels of the pooled input (``in_types * dim``).
            in_types: capsule types of the input (paper, CIFAR: 32).
            class_dim: dimension of a class capsule.
            routing_cfg: config of the capsule layer that routes to the class
                capsules (``type='HGWCaps'`` and its arguments; the types and
                the 1x1 geometry are set here).
            m_pos, m_neg, neg_weight: margin loss parameters.
            loss_weight: multiplies the margin loss.
            init_cfg: mmengine initialisation config.
        """

        def __init__(self, num_classes: int, in_channels: int,
                     in_types: int = 32, class_dim: int = 16,
                     routing_cfg: Optional[dict] = None, m_pos: float = 0.9,
                     m_neg: float = 0.1, neg_weight: float = 0.5,
                     loss_weight: float = 1.0,
                     init_cfg: Optional[dict] = None):
            super().__init__(init_cfg=init_cfg)
            if num_classes < 2:
                raise ValueError(
                    f'num_classes must be >= 2, got {num_classes}')
            if not 0 <= m_neg < m_pos <= 1:
                raise ValueError(f'need 0 <= m_neg < m_pos <= 1, got '
                                 f'm_neg={m_neg}, m_pos={m_pos}')
            self.num_classes, self.class_dim = num_classes, class_dim
            self.m_pos, self.m_neg = m_pos, m_neg
            self.neg_weight, self.loss_weight = neg_weight, loss_weight
            cfg = copy.deepcopy(routing_cfg or DEFAULT_ROUTING_CFG)
            cfg.update(in_types=in_types, out_types=num_classes)
            self.routing = build_conv_layer(cfg, in_channels,
                                            num_classes * class_dim, 1)

        def forward(self, feats: Union[Tensor, Tuple[Tensor, ...]]) -> Tensor:
            """Class scores [B, num_classes]: the class capsules' lengths."""
            x = feats[-1] if isinstance(feats, (tuple, list)) else feats
            if x.dim() == 2:
                x = x[:, :, None, None]
            poses = self.routing(x).flatten(1).view(x.shape[0],
                                                    self.num_classes,
                                                    self.class_dim)
            # The layer scales each pose to its activation in (0, 1]; the
            # clamp only removes rounding above 1.
            return poses.norm(dim=-1).clamp(max=1.0)

        def loss(self, feats, data_samples: List) -> dict:
            lengths = self(feats)
            if 'gt_score' in data_samples[0]:
                target = torch.stack([s.gt_score for s in data_samples])
            else:
                labels = torch.cat([s.gt_label for s in data_samples])
                target = torch.nn.functional.one_hot(labels.to(lengths.device),
                                                     self.num_classes)
            target = target.to(lengths)
            loss = margin_loss(lengths, target, self.m_pos, self.m_neg,
                               self.neg_weight)
            return dict(loss=self.loss_weight * loss)

        def predict(self, feats, data_samples: Optional[List] = None) -> List:
            from mmpretrain.structures import DataSample
            scores = self(feats).detach()
            labels = scores.argmax(dim=1, keepdim=True)
            if data_samples is None:
                data_samples = [None] * scores.shape[0]
            out = []
            for sample, score, label in zip(data_samples, scores, labels):
                sample = DataSample() if sample is None else sample
                sample.set_pred_score(score).set_pred_label(label)
                out.append(sample)
            return out

    __all__.append('ClassCapsuleHead')

__all__.append('margin_loss')
