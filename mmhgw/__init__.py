"""mmhgw: Hybrid Gromov-Wasserstein capsules for OpenMMLab 2.x.

Importing the package (e.g. through a config's
``custom_imports = dict(imports=['mmhgw'], allow_failed_imports=False)``)
registers everything it provides and lets mmengine resume its checkpoints
under torch's ``weights_only`` loading.
"""
from .engine import allow_mmengine_checkpoints
from .version import __version__

allow_mmengine_checkpoints()

from . import datasets, engine, models  # noqa: E402,F401  (registration)

__all__ = ['__version__']
