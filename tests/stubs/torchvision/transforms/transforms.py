from enum import Enum

import torch


class InterpolationMode(Enum):
    NEAREST = 'nearest'
    BILINEAR = 'bilinear'
    BICUBIC = 'bicubic'
    BOX = 'box'
    HAMMING = 'hamming'
    LANCZOS = 'lanczos'


class RandomResizedCrop(torch.nn.Module):
    """Only a base class to subclass; constructing it is not supported."""

    def __init__(self, *args, **kwargs):
        raise NotImplementedError('torchvision stand-in: RandomResizedCrop')
