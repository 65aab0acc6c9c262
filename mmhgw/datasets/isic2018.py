"""ISIC-2018 Task 1 (lesion boundary segmentation) for MMSegmentation."""
from mmhgw.registry import SEG_DATASETS

__all__ = []

#: Official ground-truth masks mark the lesion with 255 and the rest with 0.
LESION_VALUE = 255

if SEG_DATASETS is not None:
    from mmseg.datasets import BaseSegDataset

    @SEG_DATASETS.register_module()
    class ISIC2018Dataset(BaseSegDataset):
        """ISIC-2018 Task 1: dermoscopic ``.jpg`` images and binary masks
        ``<image id>_segmentation.png``.

        The official masks hold 0 (background) and 255 (lesion); 255 is also
        mmseg's ignore index, so the dataset maps it to class 1 through
        ``label_map`` (applied by mmseg's ``LoadAnnotations``): masks are
        read as published, no rewritten copy is needed. Layout, as written
        by ``tools/dataset_converters/isic2018.py``::

            data_root/images/{train,val,test}/ISIC_0000000.jpg
            data_root/annotations/{train,val,test}/ISIC_0000000_segmentation.png
        """
        METAINFO = dict(classes=('background', 'lesion'),
                        palette=[[0, 0, 0], [255, 255, 255]])

        def __init__(self, img_suffix='.jpg',
                     seg_map_suffix='_segmentation.png',
                     reduce_zero_label=False, **kwargs):
            super().__init__(img_suffix=img_suffix,
                             seg_map_suffix=seg_map_suffix,
                             reduce_zero_label=reduce_zero_label, **kwargs)

        @classmethod
        def get_label_map(cls, new_classes=None):
            label_map = super().get_label_map(new_classes) or {}
            label_map.setdefault(0, 0)
            label_map[LESION_VALUE] = label_map.pop(1, 1)
            return label_map

    __all__.append('ISIC2018Dataset')
