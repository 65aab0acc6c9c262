# Stock CIFAR ResNet-110 with the paper's CIFAR schedule: the baseline of
# ./hgwcaps-resnet110_cifar10.py.
_base_ = ['./_base_/resnet110_cifar10_paper-schedule.py']
custom_imports = dict(imports=['mmhgw'], allow_failed_imports=False)
