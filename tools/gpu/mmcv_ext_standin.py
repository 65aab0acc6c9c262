"""Stand-in for mmcv's compiled ops (``mmcv._ext``) while they are built.

``tools/gpu_suite.py`` copies this file to ``mmcv/_ext.py`` in a copy of
mmcv's Python sources, used only by the stages that run during the build.
mmdet and mmseg import every mmcv op when they are imported, and each op
module checks that ``mmcv._ext`` has its functions; the capsule layer, the
routing op and the UNet and DeepLabV3+ models call none of them. Every
name exists here and raises when called, so a stage that does need an op
fails, naming it, instead of computing anything else.
"""


def __getattr__(name):
    if name.startswith('__'):
        raise AttributeError(name)

    def not_built(*args, **kwargs):
        raise RuntimeError(f'mmcv op {name!r} was called, but mmcv\'s ops are '
                           f'not built yet (stand-in mmcv._ext)')

    not_built.__name__ = name
    return not_built
