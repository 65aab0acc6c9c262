"""Packaging for mmhgw, the HGWCaps plugin for MMDetection and MMSegmentation."""
import os
import os.path as osp
import warnings

from setuptools import find_packages, setup

HERE = osp.dirname(osp.abspath(__file__))


def read_requirements(name):
    """Requirement lines of ``requirements/<name>.txt`` without comments."""
    with open(osp.join(HERE, 'requirements', f'{name}.txt')) as f:
        lines = (line.split('#', 1)[0].strip() for line in f)
        return [line for line in lines if line]


def read_version():
    scope = {}
    with open(osp.join(HERE, 'mmhgw', 'version.py')) as f:
        exec(f.read(), scope)
    return scope['__version__']


def cpu_extensions():
    """The fused CPU kernels of the ops (``mmhgw._ext``).

    Optional: without torch at build time or without a C++ compiler the
    package installs without it, and the op falls back to its torch
    reference with a warning. ``MMHGW_NO_EXT=1`` skips it on purpose.
    """
    if os.environ.get('MMHGW_NO_EXT') == '1':
        return [], {}
    try:
        from torch.utils.cpp_extension import BuildExtension, CppExtension
    except ImportError:
        warnings.warn('torch is not importable at build time: mmhgw is '
                      'installed without its C++ extension')
        return [], {}

    class OptionalBuildExtension(BuildExtension):
        def run(self):
            try:
                super().run()
            except Exception as err:  # a missing compiler, a failed build
                warnings.warn(f'mmhgw: building the C++ extension failed '
                              f'({err}); the fused routing op will fall '
                              f'back to its torch reference')

    ext = CppExtension(
        'mmhgw._ext', [
            'mmhgw/ops/csrc/pybind.cpp', 'mmhgw/ops/csrc/hgw_routing_cpu.cpp',
            'mmhgw/ops/csrc/hgw_structures_cpu.cpp'
        ],
        depends=['mmhgw/ops/csrc/hgw_routing_kernel.h'],
        # -march=native: the extension is built on the machine that runs
        # it (pip install -e .); its loops are written to auto-vectorise.
        # -fopenmp: ATen's parallel_for is inline and runs serially unless
        # the extension itself is compiled with OpenMP (torch's libgomp is
        # the one that gets linked: it is loaded already).
        extra_compile_args=['-O3', '-march=native', '-fopenmp'],
        extra_link_args=['-fopenmp'])
    return [ext], dict(build_ext=OptionalBuildExtension)


ext_modules, cmdclass = cpu_extensions()

setup(
    name='mmhgw',
    version=read_version(),
    description='Hybrid Gromov-Wasserstein capsule networks (HGWCaps) for '
    'MMDetection and MMSegmentation',
    long_description=open(osp.join(HERE, 'README.md')).read(),
    long_description_content_type='text/markdown',
    packages=find_packages(include=('mmhgw', 'mmhgw.*')),
    python_requires='>=3.9',
    install_requires=(read_requirements('torch') + read_requirements('mmcv') +
                      read_requirements('runtime')),
    extras_require=dict(tests=read_requirements('tests'),
                        pretrain=read_requirements('pretrain')),
    ext_modules=ext_modules,
    cmdclass=cmdclass,
    license='Apache License 2.0',
    zip_safe=False,
)
