"""mmhgw: Hybrid Gromov-Wasserstein capsules for OpenMMLab 2.x."""
from .version import __version__

__all__ = ['__version__']
