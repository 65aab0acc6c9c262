# Stock Mask R-CNN R-50 FPN on the built-in shapes set (COCO layout, made by
# tools/make_demo_data.py): the baseline of the HGWCaps demo config. Changes
# to the stock config: data paths and classes, image size, a CPU-feasible
# schedule (batch 2, 300 proposals and 128 sampled RoIs per image instead
# of 2000 and 512, anchors scaled to 128x160 images), and, since no
# pretrained weights can be fetched offline, a backbone trained from scratch
# (BN statistics updated, no frozen stage).
_base_ = ['mmdet::mask_rcnn/mask-rcnn_r50_fpn_1x_coco.py']
# mmhgw provides the hooks below, and lets mmengine load this config's
# checkpoints under torch's weights_only loading.
custom_imports = dict(imports=['mmhgw'], allow_failed_imports=False)
# The project's runtime additions: stop a diverged run before it writes a
# NaN checkpoint; random generator states in checkpoints (exact resume).
custom_hooks = [dict(type='NonFiniteGuardHook'), dict(type='RNGStateHook')]

data_root = 'data/demo/coco/'
classes = ('circle', 'square', 'triangle', 'star')
image_size = (160, 128)  # (w, h)
max_iters = 100

model = dict(
    backbone=dict(frozen_stages=-1, norm_eval=False, init_cfg=None),
    rpn_head=dict(anchor_generator=dict(scales=[4])),
    roi_head=dict(bbox_head=dict(num_classes=len(classes)),
                  mask_head=dict(num_classes=len(classes))),
    train_cfg=dict(rpn_proposal=dict(nms_pre=1000, max_per_img=300),
                   rcnn=dict(sampler=dict(num=128))),
    test_cfg=dict(rpn=dict(nms_pre=500, max_per_img=300)))

train_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='LoadAnnotations', with_bbox=True, with_mask=True),
    dict(type='Resize', scale=image_size, keep_ratio=True),
    dict(type='RandomFlip', prob=0.5),
    dict(type='PackDetInputs')
]
test_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='Resize', scale=image_size, keep_ratio=True),
    dict(type='LoadAnnotations', with_bbox=True, with_mask=True),
    dict(
        type='PackDetInputs', meta_keys=('img_id', 'img_path', 'ori_shape',
                                         'img_shape', 'scale_factor'))
]
train_dataloader = dict(
    batch_size=2, num_workers=0, persistent_workers=False,
    sampler=dict(type='InfiniteSampler', shuffle=True), batch_sampler=None,
    dataset=dict(data_root=data_root, metainfo=dict(classes=classes),
                 ann_file='annotations/instances_train2017.json',
                 data_prefix=dict(img='train2017/'), pipeline=train_pipeline))
val_dataloader = dict(
    batch_size=4, num_workers=0, persistent_workers=False,
    dataset=dict(data_root=data_root, metainfo=dict(classes=classes),
                 ann_file='annotations/instances_val2017.json',
                 data_prefix=dict(img='val2017/'), pipeline=test_pipeline))
test_dataloader = val_dataloader
val_evaluator = dict(ann_file=data_root + 'annotations/instances_val2017.json')
test_evaluator = val_evaluator

train_cfg = dict(_delete_=True, type='IterBasedTrainLoop', max_iters=max_iters,
                 val_interval=max_iters)
param_scheduler = [
    dict(type='LinearLR', start_factor=0.01, by_epoch=False, begin=0, end=50),
    dict(type='MultiStepLR', by_epoch=False, begin=0, end=max_iters,
         milestones=[int(max_iters * 0.8)], gamma=0.1)
]
optim_wrapper = dict(optimizer=dict(lr=0.02),
                     clip_grad=dict(max_norm=10, norm_type=2))
default_hooks = dict(logger=dict(interval=10),
                     checkpoint=dict(by_epoch=False, interval=max_iters // 3))
log_processor = dict(by_epoch=False)
