"""Side by side, with seeds: stock, the stock model narrowed to the
HGWCaps parameter count, HGW routing, uniform routing, the paper's
ablations A / B / C, the count-based observed structure and the scope of
the regulariser E.

Every variant is trained with ``tools/train.py`` and evaluated with
``tools/test.py`` (the stock Runner, ``--cfg-options randomness.seed=S``)
for every seed: on the built-in data (the lesion set, UNet, ISIC-2018
layout, mIoU / mDice; with ``--tasks seg det`` also the shapes set, Mask
R-CNN, COCO layout, bbox / segm mAP), or on any data root of the task's
layout (``--data-root``, e.g. a real ISIC-2018-layout set, with
``--family crop128`` or ``deeplabv3plus-crop128`` for structures a few
pixels wide). Variants other
than the stock ones are the family's HGWCaps config with one setting
changed (``VARIANTS``); a narrowed stock variant is the stock model at the
width that matches one capsule variant's parameter count (``MATCHES``).
Writes a markdown report (mean +- std over
seeds; differences paired by seed to HGW routing and to the stock model,
with 95% confidence intervals; parameters; training time per iteration) and
a bar chart with error bars.

    python tools/analysis/ablation_study.py [--tasks seg [det]]
        [--seeds 0 1 2] [--variants stock narrow hgw uniform ...]
        [--family demo|crop128|deeplabv3plus|deeplabv3plus-crop128]
        [--data-root DIR] [--iters N]
        [--work-dir work_dirs/ablations] [--data data/ablations]
        [--out docs/ablations.md] [--image docs/images/ablations.png]
        [--title TITLE] [--section KEY] [--base-channels C]
        [--cfg-options k=v ...] [--jobs N] [--rerun]

``--jobs N`` trains N runs at a time, seed by seed (every variant of a seed
before the next seed), so that a study stopped early leaves whole seeds;
on a GPU the runs share the device, on a CPU they share the cores
(``OMP_NUM_THREADS``). Finished runs (``result.json`` in their work
directory) are reused, so an interrupted study continues where it stopped;
``--rerun`` trains anew.
The report is the section ``--section`` (default ``study``) of ``--out``
(between the lines ``<!-- study:begin -->`` and ``<!-- study:end -->``,
appended to a page without it): the rest of the page, a reading of the
results written by hand or another data set's study under another key, say,
is kept when the study writes it again.
"""
import argparse
import collections
import datetime
import glob
import json
import os
import os.path as osp
import re
import statistics
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from mmhgw.analysis.paired import fmt_interval, mean_std
from mmhgw.benchmarking import machine
from mmhgw.config_utils import NO_VALIDATION_OPTIONS, check_unique
from mmhgw.doc_sections import check_section, write_section

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))


def unet_width(base: int) -> list:
    """``--cfg-options`` giving a UNet s5-d16 FCN config ``base`` channels
    in its first stage, the heads alike (as the narrowed configs do)."""
    return [
        f'model.backbone.base_channels={base}',
        f'model.decode_head.in_channels={base}',
        f'model.decode_head.channels={base}',
        f'model.auxiliary_head.in_channels={2 * base}',
        f'model.auxiliary_head.channels={base}'
    ]


def resnet_v1c_width(base: int) -> list:
    """``--cfg-options`` giving a DeepLabV3+ R-50-D8 config ``base``
    channels in its first stage (stem and stage planes; stage 4 puts out
    ``32 * base``), the heads scaled with it as mmseg's R-18 configs scale
    them against R-50's (ASPP and FCN head at a quarter of their input,
    the low-level projection at 3/16 of stage 1's output)."""
    return [
        f'model.backbone.stem_channels={base}',
        f'model.backbone.base_channels={base}',
        f'model.decode_head.in_channels={32 * base}',
        f'model.decode_head.channels={8 * base}',
        f'model.decode_head.c1_in_channels={4 * base}',
        f'model.decode_head.c1_channels={max(1, round(3 * base / 4))}',
        f'model.auxiliary_head.in_channels={16 * base}',
        f'model.auxiliary_head.channels={4 * base}'
    ]


#: The models the families train: the title of a report section, the
#: ``--cfg-options`` giving the model a first-stage width (``width``; none:
#: ``--base-channels`` and width-matched controls do not apply), and that
#: width where the stock config does not write it (``stock_width``: the
#: backbone class's default).
MODELS = {
    'unet': dict(title='UNet s5-d16', width=unet_width),
    'deeplabv3plus': dict(title='DeepLabV3+ R-50-D8', width=resnet_v1c_width,
                          stock_width=64),
    'mask-rcnn': dict(title='Mask R-CNN R-50 FPN'),
}

#: Config files of each family per task: its model (``MODELS``) and the
#: configs of the stock model, the stock model narrowed to the HGWCaps
#: model's parameter count (where a config fixes that width; otherwise the
#: study finds it, see ``MATCHES``) and the HGWCaps model. ``demo``: the
#: demo configs (images resized to 128x128), for the built-in sets;
#: ``crop128``: UNet trained on 128x128 crops at native resolution and
#: tested on whole images, for real sets whose structures are a few pixels
#: wide; ``deeplabv3plus``: the demo's DeepLabV3+ R-50-D8 (capsules in the
#: dilated ResNet's stages 3-4, the paper's placement), images resized to
#: 128x128; ``deeplabv3plus-crop128``: that model on 128x128 crops at
#: native resolution, tested on whole images, as ``crop128``.
FAMILIES = {
    'demo': {
        'seg': ('unet',
                dict(stock='configs/demo/unet-s5-d16_fcn_demo-isic.py',
                     narrow='configs/demo/unet-s5-d16-c34_fcn_demo-isic.py',
                     hgw='configs/demo/unet-hgwcaps-s5-d16_fcn_demo-isic.py')),
        'det': (
            'mask-rcnn',
            dict(stock='configs/demo/mask-rcnn_r50_fpn_demo-shapes.py',
                 hgw='configs/demo/mask-rcnn_hgwcaps-r50_fpn_demo-shapes.py')),
    },
    'crop128': {
        'seg': ('unet',
                dict(stock='configs/study/unet-s5-d16_fcn_crop128.py',
                     narrow='configs/study/unet-s5-d16-c34_fcn_crop128.py',
                     hgw='configs/study/unet-hgwcaps-s5-d16_fcn_crop128.py')),
    },
    'deeplabv3plus': {
        'seg': ('deeplabv3plus',
                dict(
                    stock='configs/demo/deeplabv3plus_r50-d8_demo-isic.py',
                    hgw='configs/demo/'
                    'deeplabv3plus_hgwcaps-r50-d8_demo-isic.py')),
    },
    'deeplabv3plus-crop128': {
        'seg': ('deeplabv3plus',
                dict(
                    stock='configs/study/deeplabv3plus_r50-d8_crop128.py',
                    hgw='configs/study/'
                    'deeplabv3plus_hgwcaps-r50-d8_crop128.py')),
    },
}


def model_of(args, task) -> str:
    """The model (a key of ``MODELS``) of ``task`` in the study's family."""
    family = FAMILIES[args.family]
    if task not in family:
        raise SystemExit(f'family {args.family!r} has no {task!r} task; '
                         f'it has {sorted(family)}')
    return family[task][0]


_CAPS = 'model.backbone.hgw_cfg.'
#: One component per patch position, through a shared map.
_POSITION_COMPONENTS = _CAPS + 'components=positions'
#: Components from the patch positions, posed as a convolution reads them.
_POSITIONS = [_POSITION_COMPONENTS, _CAPS + 'pose_from=mean_plus_components']
#: The plan fixed at p q^T: every uniform control adds this to its variant.
_UNIFORM = [_CAPS + 'routing=uniform']
#: Every component at unit root mean square.
_NORM = [_CAPS + 'component_norm=True']

#: Variant -> (description, model of the family it starts from, options).
#: Every variant but the stock ones is the HGWCaps model with one setting
#: of its capsule layers changed, so that a variant means the same in every
#: family; options given per model (a dict keyed by ``MODELS``) change the
#: backbone itself and exist for those models only.
VARIANTS = {
    'stock': ('stock model, no capsules', 'stock', []),
    'narrow': ('stock model narrowed to the HGWCaps parameter count', 'narrow',
               []),
    'hgw': ('HGW routing, the shipped defaults', 'hgw', []),
    'uniform': ('uniform routing (plan p q^T, no optimal transport)', 'hgw',
                _UNIFORM),
    'ablA': ('A: entropic regulariser H(T) instead of the proximal KL', 'hgw',
             [_CAPS + 'solver_cfg.regularizer=entropic']),
    'ablB': ('B: no regulariser E', 'hgw', [_CAPS + 'reg_weight=0.0']),
    'ablC': ('C: no observed structure, same Wasserstein weight', 'hgw',
             [_CAPS + 'use_observed=False']),
    # The paper's warm-up ends at beta_U = U / U = 1, where its ablation C
    # says the structures without observed data lose; the layer ships 0.5.
    'beta1': ('beta 1 at the end of the warm-up (structures from the '
              'embeddings alone, Wasserstein weight 1)', 'hgw',
              [_CAPS + 'beta=1.0']),
    'counts': ('observed structure counted in the input patches', 'hgw',
               [_CAPS + 'observed=counts']),
    'reg_layer': ('E trains the capsule layers\' embeddings only', 'hgw',
                  [_CAPS + 'reg_scope=layer']),
    'reg_network': ('E also trains every layer before the capsules', 'hgw',
                    [_CAPS + 'reg_scope=network']),
    'temp05': ('activation temperature 0.5 instead of 0.1', 'hgw',
               [_CAPS + 'temperature=0.5']),
    'eps01': ('solver eps 0.1 instead of 0.01 (softer plans)', 'hgw',
              [_CAPS + 'solver_cfg.eps=0.1']),
    'parts03': ('subcapsules\' parts drawn at std 0.3 (about the fresh '
                'components\' size) instead of 1', 'hgw',
                [_CAPS + 'subcapsule_std=0.3']),
    # Whether the subcapsules, which SGD at the base rate hardly moves in
    # a short schedule, route better when they learn (docs/evidence.md).
    'sub_lr100': ('subcapsules at 100x the base learning rate (mmengine '
                  'paramwise_cfg)', 'hgw', [
                      'optim_wrapper.paramwise_cfg.custom_keys.subcapsules.'
                      'lr_mult=100'
                  ]),
    'meanpose': ('pose map of the components\' mean (the plan sets the '
                 'activations only)', 'hgw', [_CAPS + 'pose_from=mean']),
    'planpose': ('pose map of the plan\'s barycentric parts', 'hgw',
                 [_CAPS + 'pose_from=plan']),
    # Whether the plan's parts hold anything the task uses once it has the
    # mean's pose: the offsets' map starts at zero (docs/evidence.md).
    'pluspose': ('pose map of the components\' mean plus a map, zero at '
                 'the start, of the plan\'s parts\' offsets from it', 'hgw',
                 [_CAPS + 'pose_from=mean_plus_plan']),
    # Its control: the same addition from the components themselves, no
    # plan (what the mean leaves out, reached without a matching).
    'comppose': ('pose map of the components\' mean plus a map, zero at '
                 'the start, of the components\' offsets from it (no plan)',
                 'hgw', [_CAPS + 'pose_from=mean_plus_components']),
    # The former default: a half more solve per layer for plans nearer the
    # converged one (docs/benchmarks.md, convergence); whether the model
    # gains from them (docs/evidence.md, twenty-sixth screen).
    'steps3': ('3 proximal steps instead of 2', 'hgw',
               [_CAPS + 'solver_cfg.outer_iters=3']),
    'unroll': ('gradient through the solver iterations, not the envelope',
               'hgw', [_CAPS + 'solver_cfg.grad=unroll']),
    # The paper's pose (the plan's barycentric parts) read from plans the
    # task can shape: soft plans (eps 0.1, a smooth function of the input,
    # where near-hard ones jump between assignments) and the gradient
    # through the iterations, so that the task trains the matching itself.
    'planpose_unroll': ('pose map of the plan\'s barycentric parts, '
                        'gradient through the solver iterations', 'hgw', [
                            _CAPS + 'pose_from=plan',
                            _CAPS + 'solver_cfg.grad=unroll'
                        ]),
    'planpose_soft_unroll': ('pose map of the plan\'s barycentric parts, '
                             'soft plans (eps 0.1), gradient through the '
                             'solver iterations', 'hgw', [
                                 _CAPS + 'pose_from=plan',
                                 _CAPS + 'solver_cfg.eps=0.1',
                                 _CAPS + 'solver_cfg.grad=unroll'
                             ]),
    # The plan's parts lie far from 0, so at the default gain their pose is
    # long and its gradient small: the same pose at the default pose's
    # starting length (HGWCaps(pose_gain=...)).
    'planpose_gain025': ('pose map of the plan\'s barycentric parts, the map '
                         'drawn at a quarter of the default scale', 'hgw',
                         [_CAPS + 'pose_from=plan', _CAPS + 'pose_gain=0.25']),
    'uniform_reg_layer': ('uniform routing, E on the embeddings only', 'hgw',
                          _UNIFORM + [_CAPS + 'reg_scope=layer']),
    'align': ('alignment term of Eq. 27 at weight 1', 'hgw',
              [_CAPS + 'align_weight=1.0']),
    'uniform_align': ('uniform routing, alignment term at weight 1', 'hgw',
                      _UNIFORM + [_CAPS + 'align_weight=1.0']),
    'align_hard': ('alignment term at weight 1, shares at temperature 0.01 '
                   '(the best-aligned type takes it)', 'hgw', [
                       _CAPS + 'align_weight=1.0',
                       _CAPS + 'align_temperature=0.01'
                   ]),
    # Components without a fixed identity: what is at each position of
    # the patch, so the matching cannot settle to one grouping of input
    # types (docs/evidence.md); the pose reads every position, as the
    # convolution it replaces does. Its control fixes the plan.
    'positions': ('components are the patch positions (one shared map), '
                  'pose of their mean plus their offsets', 'hgw', _POSITIONS),
    'positions_uniform': ('the positions variant under uniform routing', 'hgw',
                          _POSITIONS + _UNIFORM),
    # The same with every component at unit root mean square, so that the
    # cross costs stay below their bound and the plan can see the input.
    'positions_norm': ('the positions variant with every component '
                       'divided by its root mean square', 'hgw',
                       _POSITIONS + _NORM),
    'positions_norm_uniform': ('the positions_norm variant under uniform '
                               'routing', 'hgw',
                               _POSITIONS + _NORM + _UNIFORM),
    # Whether the matching earns its place once it also shapes the pose:
    # the positions_norm layer plus what the plan gathers from the patch's
    # positions into each part (a map zero at the start). Under uniform
    # routing the gathered parts are the mean and add nothing, so its
    # control is positions_norm_uniform.
    'positions_norm_plan': ('the positions_norm variant plus a pose map, '
                            'zero at the start, of the plan\'s parts\' '
                            'offsets from the mean', 'hgw', [
                                _POSITION_COMPONENTS, _CAPS +
                                'pose_from=mean_plus_components_plus_plan'
                            ] + _NORM),
    # The shipped components (one per input type) at unit root mean
    # square: whether their length or their identity keeps the plan one
    # grouping everywhere (docs/evidence.md).
    'norm': ('every component divided by its root mean square', 'hgw', _NORM),
    'uniform_norm': ('the norm variant under uniform routing', 'hgw',
                     _NORM + _UNIFORM),
    'dec_only': ('capsules in the deepest decoder stage only, not also in '
                 'the deepest encoder stage (the paper\'s parameter share)',
                 'hgw', {
                     'unet': [
                         'model.backbone.enc_with_hgw='
                         '[False,False,False,False,False]'
                     ]
                 }),
    'narrow_dec_only': ('stock model narrowed to the dec_only parameter '
                        'count', 'stock', {'unet': []}),
}

#: Narrowed stock variant -> the HGWCaps variant whose parameter count it
#: matches. ``narrow`` at the family's own width is the family's narrowed
#: config (its width fixed in the file); every other case, and every width
#: under ``--base-channels``, is the stock model at the width found by
#: ``matched_width``.
MATCHES = {'narrow': 'hgw', 'narrow_dec_only': 'dec_only'}


def variant_options(variant: str, model: str) -> list:
    """The ``--cfg-options`` that turn the family's ``model`` (a key of
    ``MODELS``) into ``variant``."""
    options = VARIANTS[variant][2]
    if not isinstance(options, dict):
        return options
    if model not in options:
        raise SystemExit(f'variant {variant!r} exists for the models '
                         f'{sorted(options)}, not for {model!r}')
    return options[model]


TASKS = {
    # The threshold-free scores (SeparabilityMetric) tell a model that
    # ranks pixels well but thresholds them wrong (one class everywhere,
    # common in short schedules) from one that learned nothing.
    'seg': dict(
        metrics=[('mIoU', 'mIoU'), ('mDice', 'mDice'), ('AUC', 'sep/AUC'),
                 ('best-threshold mIoU', 'sep/best_mIoU')], data='ISIC2018',
        extra_metrics=[dict(type='SeparabilityMetric')]),
    'det': dict(
        metrics=[('bbox mAP', 'coco/bbox_mAP'), ('segm mAP', 'coco/segm_mAP')],
        data='coco'),
}


def config_of(args, task, variant):
    """The config file of ``variant`` in the study's family. A narrowed
    stock variant of a family without a narrowed config is its stock
    config at the width ``matched_width`` finds."""
    model = model_of(args, task)
    configs = FAMILIES[args.family][task][1]
    role = VARIANTS[variant][1]
    if role == 'narrow' and 'narrow' not in configs and \
            'width' in MODELS[model]:
        role = 'stock'
    if role not in configs:
        raise SystemExit(f'family {args.family!r} has no {role!r} model for '
                         f'{task!r} (variant {variant!r}); it has '
                         f'{sorted(configs)}')
    return configs[role]


def data_root_of(args, task):
    """The data of ``task``: ``--data-root`` as given, else the built-in
    set under ``--data``."""
    if args.data_root:
        return args.data_root
    return osp.join(args.data, TASKS[task]['data'])


def data_options(task, root):
    """``--cfg-options`` pointing a config at the data in ``root``."""
    opts = [
        f'{loader}.dataset.data_root={root}'
        for loader in ('train_dataloader', 'val_dataloader', 'test_dataloader')
    ]
    if task == 'det':
        ann = osp.join(root, 'annotations', 'instances_val2017.json')
        opts += [
            f'val_evaluator.ann_file={ann}', f'test_evaluator.ann_file={ann}'
        ]
    return opts


def ensure_data(data_root, tasks):
    """Generate the built-in sets (deterministic) unless present."""
    from mmhgw.datasets.synthetic import DATA_VERSION, make_all
    only = [TASKS[t]['data'] for t in tasks]
    names = {'ISIC2018': 'isic', 'coco': 'coco'}
    for sub in only:
        marker = osp.join(data_root, sub, '.complete')
        if osp.exists(marker) and open(marker).read() == DATA_VERSION:
            continue
        make_all(data_root, only=[names[sub]])
        with open(marker, 'w') as f:
            f.write(DATA_VERSION)


def run(cmd, log_path):
    """Run ``cmd`` in the repository root, output to ``log_path``."""
    with open(log_path, 'w') as log:
        done = subprocess.run(cmd, cwd=ROOT, stdout=log,
                              stderr=subprocess.STDOUT, text=True)
    if done.returncode:
        with open(log_path) as f:
            tail = f.read()[-3000:]
        raise SystemExit(f'{" ".join(cmd)} failed ({done.returncode}); '
                         f'see {log_path}:\n{tail}')


def iteration_times(work):
    """Per-iteration training times logged by the Runner (``time`` in the
    scalars of the LocalVisBackend), first iteration left out (warm-up)."""
    times = []
    for path in glob.glob(osp.join(work, '*', 'vis_data', 'scalars.json')):
        with open(path) as f:
            for line in f:
                entry = json.loads(line)
                if 'time' in entry and 'loss' in entry:
                    times.append((entry['step'], entry['time']))
    times = [t for _, t in sorted(times)]
    return times[1:] if len(times) > 1 else times


def schedule_options(cfg, iters):
    """``--cfg-options`` giving a config a schedule of ``iters``
    iterations: the polynomial decay and the beta warm-up (a quarter of the
    schedule) stretched to it. The one checkpoint at the end is every
    run's (:func:`train_and_test`), whatever its schedule."""
    opts = [f'train_cfg.max_iters={iters}']
    for i, sched in enumerate(cfg.get('param_scheduler') or []):
        if 'end' in sched:
            opts.append(f'param_scheduler.{i}.end={iters}')
    for i, hook in enumerate(cfg.get('custom_hooks') or []):
        if hook.get('type') == 'HGWBetaWarmupHook':
            opts.append(f'custom_hooks.{i}.warmup_iters={max(1, iters // 4)}')
    return opts


def parse_options(options):
    """``key=value`` strings to the dict ``--cfg-options`` gives."""
    from mmengine.config import DictAction
    return {
        key: DictAction._parse_iterable(value)
        for key, value in (o.split('=', 1) for o in options)
    }


#: Parsing and dumping configs is not known to be thread-safe (mmengine
#: goes through temporary files and module imports): one at a time under
#: ``--jobs``.
_CONFIG_LOCK = threading.Lock()


def merged_config(config, options):
    """The config file ``config`` with ``--cfg-options`` ``options``."""
    from mmengine.config import Config
    with _CONFIG_LOCK:
        cfg = Config.fromfile(osp.join(ROOT, config))
        cfg.merge_from_dict(parse_options(options))
    return cfg


def count_parameters(config, options):
    """Parameters of the model of ``config`` with ``options``, built
    offline."""
    from mmhgw.config_utils import (build_config_model, load_offline_config,
                                    merge_cfg_options)
    cfg = load_offline_config(osp.join(ROOT, config))
    merge_cfg_options(cfg, parse_options(options))
    model = build_config_model(cfg, init=False)
    return sum(p.numel() for p in model.parameters())


def matched_width(args, task, variant='narrow'):
    """The first-stage width of the narrowed stock model ``variant``: the
    one whose parameter count is nearest that of the HGWCaps variant it
    matches (``MATCHES``), both at ``--base-channels`` (at the family's own
    width without it). The count grows with the width, so a bisection finds
    it."""
    extra = list(args.cfg_options or [])
    key = (args.family, task, args.base_channels, variant, tuple(extra))
    if key not in _MATCHED:
        model = MODELS[model_of(args, task)]
        width, target_variant = model['width'], MATCHES[variant]
        stock = config_of(args, task, 'stock')
        top = args.base_channels
        if top is None:
            top = merged_config(stock, extra).model.backbone.get(
                'base_channels', model.get('stock_width'))
        target = count_parameters(
            config_of(args, task, target_variant),
            width(top) +
            variant_options(target_variant, model_of(args, task)) + extra)
        counts = {}  # width -> stock count; each model built once

        def count_at(b):
            if b not in counts:
                counts[b] = count_parameters(stock, width(b) + extra)
            return counts[b]

        low, high = 1, top
        while low < high:  # the smallest width with at least the target
            mid = (low + high) // 2
            if count_at(mid) < target:
                low = mid + 1
            else:
                high = mid
        _MATCHED[key] = min({low, max(1, low - 1)},
                            key=lambda b: abs(count_at(b) - target))
    return _MATCHED[key]


_MATCHED = {}


def width_is_matched(args, task, variant):
    """Whether ``variant`` is a narrowed stock model whose width
    ``matched_width`` finds, rather than one its config file fixes."""
    return variant in MATCHES and (
        args.base_channels is not None or VARIANTS[variant][1] != 'narrow'
        or 'narrow' not in FAMILIES[args.family][task][1])


def model_options(args, task, variant):
    """The ``--cfg-options`` of a variant's model: its width (under
    ``--base-channels``, or where ``width_is_matched``: a narrowed stock
    model's width matches the capsule variant ``MATCHES`` names), its
    setting (``VARIANTS``), then ``--cfg-options``."""
    base = args.base_channels
    if width_is_matched(args, task, variant):
        base = matched_width(args, task, variant)
    model = model_of(args, task)
    width = [] if base is None else MODELS[model]['width'](base)
    return width + variant_options(variant, model) + list(args.cfg_options
                                                          or [])


def train_and_test(task, variant, seed, args):
    """One run; its result dict (metrics, time per iteration)."""
    config = config_of(args, task, variant)
    work = osp.join(args.work_dir, task, variant, f'seed{seed}')
    result_file = osp.join(work, 'result.json')
    options = (data_options(task, data_root_of(args, task)) +
               model_options(args, task, variant))
    if osp.exists(result_file) and not args.rerun:
        with open(result_file) as f:
            result = json.load(f)
        made_with = (result.get('config'), result.get('options'),
                     result.get('requested_iters'))
        if made_with != (config, options, args.iters):
            raise SystemExit(
                f'{result_file} was made with other settings (config, '
                f'options or --iters) than this study asks for; pass '
                f'--rerun to train again or use another --work-dir')
        return result
    os.makedirs(work, exist_ok=True)
    start = time.perf_counter()
    requested = list(options)
    if args.iters:
        options = schedule_options(merged_config(config, options),
                                   args.iters) + options
    run_cfg = merged_config(config, options)
    iters = int(run_cfg.train_cfg.max_iters)
    print(f'{task} {variant:8s} seed {seed}: training {iters} iterations',
          flush=True)
    # One checkpoint at the end, no validation inside the training run:
    # the evaluation is the test tool's. The validation options go last,
    # after the data options that set keys inside ``val_dataloader``.
    run([
        sys.executable, 'tools/train.py', config, '--work-dir', work,
        '--cfg-options', f'randomness.seed={seed}',
        f'default_hooks.checkpoint.interval={iters}',
        'default_hooks.logger.interval=1', *options, *NO_VALIDATION_OPTIONS
    ], osp.join(work, 'train.out'))
    from mmhgw.engine.work_dir import latest_checkpoint
    checkpoint = latest_checkpoint(work)
    metrics_file = osp.join(work, 'metrics.json')
    run([
        sys.executable, 'tools/test.py',
        test_config(run_cfg, TASKS[task], work), checkpoint, '--work-dir',
        osp.join(work, 'test'), '--metrics-out', metrics_file, '--cfg-options',
        f'randomness.seed={seed}'
    ], osp.join(work, 'test.out'))
    with open(metrics_file) as f:
        metrics = json.load(f)
    times = iteration_times(work)
    result = dict(
        task=task, variant=variant, seed=seed, iters=iters, config=config,
        options=requested, requested_iters=args.iters, metrics={
            name: metrics.get(key)
            for name, key in TASKS[task]['metrics']
        }, time_per_iter=statistics.fmean(times) if times else None,
        wall_minutes=(time.perf_counter() - start) / 60,
        machine=machine(training_device()))
    with open(result_file, 'w') as f:
        json.dump(result, f, indent=2)
    return result


def training_device() -> str:
    """The device the train tool's Runner picks: the GPU where there is
    one."""
    import torch
    return 'cuda' if torch.cuda.is_available() else 'cpu'


def run_all(args) -> dict:
    """Every run of the study, ``--jobs`` at a time: task -> variant ->
    results in ``--seeds`` order. Runs start seed by seed; a run that fails
    does not stop the others, and the failures are raised together once
    every run has ended."""
    # The narrowed widths are found once, before any thread needs them.
    for task in args.tasks:
        for variant in args.variants:
            model_options(args, task, variant)
    jobs = [(task, variant, seed) for task in args.tasks for seed in args.seeds
            for variant in args.variants]

    def one(task, variant, seed):
        try:
            return train_and_test(task, variant, seed, args)
        except (Exception, SystemExit) as err:  # said at once, not last
            print(f'{task} {variant:8s} seed {seed}: failed: {err!r}',
                  flush=True)
            raise

    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        futures = {job: pool.submit(one, *job) for job in jobs}
    done, failed = {}, []
    for (task, variant, seed), future in futures.items():
        try:
            done[task, variant, seed] = future.result()
        except (Exception, SystemExit) as err:
            failed.append(f'{task} {variant} seed {seed}: {err!r}')
    if failed:
        raise SystemExit(f'{len(failed)} of {len(jobs)} runs failed:\n' +
                         '\n'.join(failed))
    return {
        task: {
            variant: [done[task, variant, seed] for seed in args.seeds]
            for variant in args.variants
        }
        for task in args.tasks
    }


def test_config(cfg, task: dict, work: str) -> str:
    """Write ``work/test_config.py``, the config the run's test uses: the
    run's config ``cfg`` (its options merged: data, variant, schedule) with
    the task's ``extra_metrics`` added to its test evaluator. Complete in
    itself, so that an analysis tool given it with the run's checkpoint
    tests the model as trained: a variant that differs only in options
    (uniform routing) has the weights of another, and a checkpoint cannot
    tell them apart."""
    extra = task.get('extra_metrics')
    if extra:
        evaluator = cfg.test_evaluator
        cfg.test_evaluator = [
            *(evaluator if isinstance(evaluator, list) else [evaluator]),
            *extra
        ]
    path = osp.join(work, 'test_config.py')
    with _CONFIG_LOCK:
        cfg.dump(path)
    return path


def paired_differences(runs, reference_runs, metric):
    """Per-seed differences ``variant - reference`` over the seeds both
    have."""
    ref = {r['seed']: r['metrics'].get(metric) for r in reference_runs}
    return [
        r['metrics'].get(metric) - ref[r['seed']] for r in runs
        if r['seed'] in ref and r['metrics'].get(metric) is not None
        and ref[r['seed']] is not None
    ]


def fmt(mean, std, digits=2):
    if mean is None:
        return 'n/a'
    return f'{mean:.{digits}f} ± {std:.{digits}f}'


#: What ``make ablations`` runs: the paper's ablations and the controls.
DEFAULT_VARIANTS = [
    'stock', 'narrow', 'hgw', 'uniform', 'ablA', 'ablB', 'ablC', 'counts'
]

#: The variants every other is compared with, paired by seed.
CI_REFERENCES = ('hgw', 'stock')


def task_section(task, variants, results, params):
    """Markdown table of one task."""
    spec = TASKS[task]
    digits = 2 if task == 'seg' else 3
    names = [name for name, _ in spec['metrics']]
    header = (['variant', 'what', 'params', 'time / iter (s)'] +
              [f'{n} (mean ± std)' for n in names] +
              [f'{names[0]} - HGW (paired)', f'{names[0]} per seed'] +
              [f'{names[0]} - {ref}, 95% CI' for ref in CI_REFERENCES])
    lines = ['| ' + ' | '.join(header) + ' |', '|' + '---|' * len(header)]
    by_seed = {v: {r['seed']: r for r in results[v]} for v in variants}
    for v in variants:
        runs = results[v]
        cells = [
            v, VARIANTS[v][0], f'{params[v] / 1e6:.2f}M',
            fmt(*mean_std([r['time_per_iter'] for r in runs]))
        ]
        for name in names:
            cells.append(
                fmt(*mean_std([r['metrics'].get(name) for r in runs]), digits))
        if 'hgw' in by_seed and v != 'hgw':
            diffs = [
                by_seed[v][s]['metrics'][names[0]] -
                by_seed['hgw'][s]['metrics'][names[0]] for s in by_seed[v]
                if s in by_seed['hgw']
            ]
            cells.append(fmt(*mean_std(diffs), digits))
        else:
            cells.append('')
        cells.append(', '.join(f'{r["metrics"][names[0]]:.{digits}f}'
                               for r in sorted(runs, key=lambda r: r['seed'])))
        for ref in CI_REFERENCES:
            cells.append(
                '' if ref == v or ref not in results else fmt_interval(
                    paired_differences(runs, results[ref], names[0]), digits))
        lines.append('| ' + ' | '.join(cells) + ' |')
    return '\n'.join(lines)


def bar_chart(tasks, variants, results, path):
    """One panel per task and metric: mean over seeds, std as error bar,
    every seed as a dot."""
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    panels = [(task, name) for task in tasks
              for name, _ in TASKS[task]['metrics']]
    fig, axes = plt.subplots(
        1, len(panels),
        figsize=(max(4.0, 0.65 * len(variants)) * len(panels), 3.6),
        squeeze=False)
    for ax, (task, name) in zip(axes[0], panels):
        runs = results[task]
        means, stds = zip(*(mean_std([r['metrics'].get(name) for r in runs[v]])
                            for v in variants))
        xs = range(len(variants))
        ax.bar(
            xs, [m or 0 for m in means], yerr=[s or 0 for s in stds],
            capsize=4, color=[
                '0.6'
                if v == 'stock' else 'tab:blue' if v == 'hgw' else 'tab:orange'
                for v in variants
            ])
        for x, v in zip(xs, variants):
            ys = [
                r['metrics'].get(name) for r in runs[v]
                if r['metrics'].get(name) is not None
            ]
            ax.plot([x] * len(ys), ys, 'k.', markersize=4)
        ax.set_xticks(list(xs), variants, rotation=30)
        ax.set_title(f'{task}: {name}', fontsize=10)
        valid = [m for m in means if m is not None]
        if valid:
            low = min(
                min(valid) - 3 * max(s or 0 for s in stds),
                min(valid) * 0.9)
            ax.set_ylim(bottom=max(0.0, low))
    fig.tight_layout()
    os.makedirs(osp.dirname(osp.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def machines_of(results) -> str:
    """Where the runs of ``results`` (task -> variant -> runs) trained,
    with the number of runs on each: the same seed can train differently
    on CPUs of other instruction sets."""
    counts = collections.Counter(
        r.get('machine') or 'a machine not recorded'
        for task in results.values() for runs in task.values() for r in runs)
    return '; '.join(f'{m} ({n} run{"s" if n > 1 else ""})'
                     for m, n in sorted(counts.items()))


def report(args, tasks, results, params, duration):
    seeds = ', '.join(str(s) for s in args.seeds)
    where = args.data_root or args.data
    data = osp.relpath(where, ROOT)
    if data.startswith('..'):  # outside the project: as given
        data = where
    what = 'the data' if args.data_root else 'the built-in data'
    iters = {
        t: sorted({r['iters']
                   for v in results[t]
                   for r in results[t][v]})
        for t in tasks
    }
    image_rel = osp.relpath(osp.abspath(args.image),
                            osp.dirname(osp.abspath(args.out)))
    parts = [
        f'Written by `tools/analysis/ablation_study.py` on '
        f'{datetime.date.today().isoformat()} ({duration}). Every '
        f'variant trained with `tools/train.py` and evaluated with '
        f'`tools/test.py` for seeds {seeds} (`randomness.seed`), on '
        f'{what} in `{data}` (config family `{args.family}`), from '
        f'scratch, on {machines_of(results)}. Mean ± standard deviation '
        f'over seeds; '
        f'"- HGW (paired)" is the mean ± std of the per-seed difference to '
        f'HGW routing of the same seed; "- X, 95% CI" the mean of the '
        f'per-seed differences to variant X with its Student-t 95% '
        f'confidence interval (an interval that excludes 0 is a '
        f'difference beyond the seed spread). Time per iteration is the '
        f'Runner\'s logged training time per iteration, the first left '
        f'out.\n'
    ]
    narrowed = [
        f'`{v}` at {matched_width(args, tasks[0], v)}' for v in args.variants
        if width_is_matched(args, tasks[0], v)
    ]
    if args.base_channels is not None or narrowed:
        at = ('Models at their configs\' widths' if args.base_channels is None
              else f'Models at {args.base_channels} channels in their first '
              f'stage (`--base-channels`)')
        if narrowed:
            at += ('; the narrowed stock models at the width whose parameter '
                   'count is nearest the capsule model they match: ' +
                   ', '.join(narrowed))
        parts.append(at + '.\n')
    if args.cfg_options:
        parts.append('Options for every run: `' + ' '.join(args.cfg_options) +
                     '`.\n')
    for task in tasks:
        parts.append(f'## {MODELS[model_of(args, task)]["title"]}, `{data}`, '
                     f'{"/".join(map(str, iters[task]))} iterations\n')
        parts.append(
            task_section(task, args.variants, results[task], params[task]) +
            '\n')
    parts.append(f'![ablation bar chart]({image_rel})\n')
    return '\n'.join(parts)


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--tasks', nargs='+', default=['seg'],
                        choices=list(TASKS))
    parser.add_argument('--variants', nargs='+', default=DEFAULT_VARIANTS,
                        choices=list(VARIANTS))
    parser.add_argument('--seeds', nargs='+', type=int, default=[0, 1, 2])
    parser.add_argument('--work-dir', default=osp.join(ROOT, 'work_dirs',
                                                       'ablations'))
    parser.add_argument('--data', default=osp.join(ROOT, 'data', 'ablations'))
    parser.add_argument('--out', default=osp.join(ROOT, 'docs',
                                                  'ablations.md'))
    parser.add_argument(
        '--image', default=osp.join(ROOT, 'docs', 'images', 'ablations.png'))
    parser.add_argument('--family', default='demo', choices=list(FAMILIES),
                        help='config family (see FAMILIES)')
    parser.add_argument(
        '--data-root', help='an existing data root in the layout of the '
        'task (ISIC-2018 for seg) instead of the built-in '
        'set; one task only')
    parser.add_argument(
        '--iters', type=int,
        help='training iterations (schedule, beta warm-up '
        'and checkpoint follow); default: the config\'s')
    parser.add_argument(
        '--section', default='study', metavar='KEY',
        help='the section of --out the report replaces (its marker lines '
        'name KEY), so that one page can hold a study per data set')
    parser.add_argument(
        '--title', default='Ablation study',
        help='heading of a new report page (an existing page keeps its own)')
    parser.add_argument(
        '--base-channels', type=int,
        help='first-stage width of every model (UNet: base_channels, heads '
        'alike; DeepLabV3+: stem and stage planes, heads scaled with them); '
        'a narrowed stock model gets the width that matches its '
        'capsule model\'s parameter count at it. Default: each config\'s '
        'own')
    parser.add_argument('--cfg-options', nargs='+', default=None,
                        help='key=value options for every train / test run')
    parser.add_argument('--rerun', action='store_true',
                        help='train again even where a result exists')
    parser.add_argument(
        '--jobs', type=int, default=1,
        help='runs trained at a time, seed by seed (default 1)')
    args = parser.parse_args()
    check_unique(parser, args, 'tasks', 'variants', 'seeds')
    if args.jobs < 1:
        parser.error(f'--jobs must be >= 1, got {args.jobs}')
    if args.data_root:
        if len(args.tasks) != 1:
            parser.error('--data-root serves one task; got --tasks '
                         f'{" ".join(args.tasks)}')
        if not osp.isdir(args.data_root):
            parser.error(f'--data-root {args.data_root} is not a directory')
        args.data_root = osp.abspath(args.data_root)
    if args.base_channels is not None:
        if args.base_channels < 1:
            parser.error(f'--base-channels must be >= 1, got '
                         f'{args.base_channels}')
        others = sorted(t for t in args.tasks
                        if 'width' not in MODELS[model_of(args, t)])
        if others:
            parser.error(f'--base-channels applies to the models '
                         f'{sorted(m for m in MODELS if "width" in MODELS[m])}'
                         f'; not to the tasks {others} of family '
                         f'{args.family!r}')
    if args.iters is not None and args.iters < 1:
        parser.error(f'--iters must be >= 1, got {args.iters}')
    for task in args.tasks:
        try:
            model = model_of(args, task)
            for variant in args.variants:
                variant_options(variant, model)
                config_of(args, task, variant)
        except SystemExit as err:
            parser.error(f'--variants: {err}')
    if not re.fullmatch(r'[\w.-]+', args.section):
        parser.error(f'--section must be letters, digits, "_", "-" or "." '
                     f'(it names the marker lines); got {args.section!r}')
    if osp.exists(args.out):
        with open(args.out) as f:
            text = f.read()
        try:  # before any run, not after the last
            check_section(text, args.section)
        except ValueError as err:
            parser.error(f'--out {args.out}: {err}')
    return args


def main():
    args = parse_args()
    args.data = osp.abspath(args.data)
    start = time.perf_counter()
    if not args.data_root:
        ensure_data(args.data, args.tasks)
    results, params = run_all(args), {}
    for task in args.tasks:
        params[task] = {
            v: count_parameters(config_of(args, task, v),
                                model_options(args, task, v))
            for v in args.variants
        }
    minutes = (time.perf_counter() - start) / 60
    runs = [r for task in results.values() for rs in task.values() for r in rs]
    if all('wall_minutes' in r for r in runs):
        # Runs reused from earlier invocations count with their own time.
        duration = (f'{len(runs)} runs, '
                    f'{sum(r["wall_minutes"] for r in runs):.0f} min of '
                    f'training and testing')
    else:
        duration = f'this invocation {minutes:.0f} min'
    bar_chart(args.tasks, args.variants, results, args.image)
    text = report(args, args.tasks, results, params, duration)
    write_section(args.out, args.section, text, new_page=f'# {args.title}\n')
    print('\n' + text)
    print(f'written to {args.out} and {args.image}')


if __name__ == '__main__':
    main()
