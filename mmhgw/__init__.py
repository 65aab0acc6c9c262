"""mmhgw: Hybrid Gromov-Wasserstein capsules for OpenMMLab 2.x.

Importing the package (e.g. through a config's
``custom_imports = dict(imports=['mmhgw'], allow_failed_imports=False)``)
registers everything it provides (also the routing op's FLOP handle with
mmengine's analyzers, so upstream ``get_flops`` tools count it) and lets
mmengine resume its checkpoints under torch's ``weights_only`` loading.
"""
from .engine import allow_mmengine_checkpoints
from .version import __version__

allow_mmengine_checkpoints()

from . import analysis, datasets, engine, evaluation, models  # noqa: E402,F401

# (registration: modules, datasets, hooks, and the routing op's FLOP
# handle with mmengine's analyzers)

__all__ = ['__version__']
