# ./hgwcaps-resnet110_cifar10.py on CIFAR-100 (the paper's Table "CIFAR-100");
# data settings as MMPretrain's _base_/datasets/cifar100_bs16.py.
_base_ = ['./hgwcaps-resnet110_cifar10.py']

dataset_type = 'CIFAR100'
data_preprocessor = dict(num_classes=100, mean=[129.304, 124.070, 112.434],
                         std=[68.170, 65.392, 70.418])
train_dataloader = dict(
    dataset=dict(type=dataset_type, data_root='data/cifar100'))
val_dataloader = dict(
    dataset=dict(type=dataset_type, data_root='data/cifar100/'))
test_dataloader = val_dataloader
model = dict(head=dict(num_classes=100))
