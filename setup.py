"""Packaging for mmhgw, the HGWCaps plugin for MMDetection and MMSegmentation."""
import os.path as osp

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
    license='Apache License 2.0',
    zip_safe=False,
)
