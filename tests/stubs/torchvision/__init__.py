"""Test stand-in for the few torchvision names MMPretrain imports.

MMPretrain imports torchvision at module level (transforms' interpolation
modes, a base class, box ops) although the parts the tests use never call
it. Where no torchvision build matches the installed torch (PyPI's Linux
torchvision wheels need a CUDA torch), ``tests/conftest.py`` puts this
package on ``sys.path`` just while MMPretrain's modules are imported, then
takes it away again. Everything here either works as torchvision's
function of the same name or raises ``NotImplementedError``.
"""
from . import ops, transforms  # noqa: F401

__version__ = '0.0.0+stand-in'
