"""Convert a stock checkpoint into one for its HGWCaps counterpart by
layer-wise distillation.

    python tools/model_converters/capsules_from_stock.py SRC CONFIG OUT
        [--images DIR] [--num-images 256] [--img-size H W] [--steps 300]
        [--batch-size 16] [--lr 3e-3] [--device cpu] [--seed 0]

SRC is a checkpoint of the stock model: a ResNet in torchvision or
MMDetection / MMSegmentation layout, a ResNetV1c, a UNet (bare backbone
keys), or a whole detector / segmentor / classifier (``backbone.`` keys).
CONFIG is the HGWCaps config to convert for (e.g.
``configs/mask_rcnn/mask-rcnn_hgwcaps-r50_fpn_1x_coco.py``).

Every layer that SRC has in the HGWCaps model is copied. Every HGW capsule
layer (with the BN after it) is then fitted, by Adam on the mean squared
error, to reproduce the output of the convolution + BN it replaces, on the
activations of unlabeled images (the built-in generated sets by default,
any image folder with ``--images``). The fit goes stage by stage (a stage
is the innermost ``nn.Sequential`` / ``nn.ModuleList`` holding the layer,
e.g. ``layer3`` of a ResNet): one pass over the images caches the inputs of
a stage's layers, with the stages before it already running their fitted
capsule layers and the stage itself still the stock convolutions. So each
stage learns from the activations the converted model gives it, up to the
drift inside the stage.

OUT holds what SRC covered: a backbone checkpoint (bare keys) from a
backbone checkpoint, loaded by the config with
``model.backbone.init_cfg=dict(type='Pretrained', checkpoint=OUT)``; a whole
model from a whole model (``load_from=OUT``, or ``init_cfg`` with
``prefix='backbone.'`` for its backbone). Per layer, the relative error
``||y_hat - y|| / ||y||`` on the images is printed before (random capsule
layer, stock BN) and after fitting, and stored in ``OUT['meta']``.
"""
import argparse
import contextlib
import copy
import glob
import os
import os.path as osp
import sys
import tempfile
import time
from collections import OrderedDict
from typing import Callable, Dict, Iterator, List, Optional, Tuple

import cv2
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

import mmhgw  # noqa: F401  (registration)
from mmhgw.arg_checks import POSITIVE, check_number
from mmhgw.config_utils import (build_config_model, load_offline_config,
                                merge_cfg_options)
from mmhgw.engine.checkpoint import load_checkpoint_file
from mmhgw.models import HGWCaps
from mmhgw.models.backbones.capsule_swap import CAPSULE_NORM_PREFIX

IMAGE_EXTS = ('.jpg', '.jpeg', '.png', '.bmp')


@contextlib.contextmanager
def progress(total: int) -> Iterator[Callable[[], None]]:
    """Yields ``step()``, which advances mmengine's progress bar over
    ``total`` steps when stdout is a terminal and does nothing otherwise:
    the bar redraws itself with carriage returns, which pile up in a log
    file."""
    if not sys.stdout.isatty():
        yield lambda: None
        return
    from mmengine.utils import ProgressBar
    bar = ProgressBar(total, file=sys.stdout)
    yield bar.update
    sys.stdout.write('\n')


class ConvertError(Exception):
    """A bad input; the message names the file or argument at fault."""


# --------------------------------------------------------------- checkpoint
def read_state_dict(path: str) -> Dict[str, torch.Tensor]:
    """Tensors of a checkpoint (mmengine, torchvision or a bare dict), with
    DistributedDataParallel's ``module.`` prefix removed."""
    if not osp.isfile(path):
        raise ConvertError(f'SRC: no such file: {path}')
    try:
        ckpt = load_checkpoint_file(path, map_location='cpu')
    except Exception as e:  # noqa: BLE001  (any unreadable file)
        raise ConvertError(f'SRC: cannot read {path} as a torch '
                           f'checkpoint ({type(e).__name__}: {e})')
    if isinstance(ckpt, dict):
        for key in ('state_dict', 'model'):
            if isinstance(ckpt.get(key), dict):
                ckpt = ckpt[key]
                break
    if not isinstance(ckpt, dict) or not any(
            isinstance(v, torch.Tensor) for v in ckpt.values()):
        raise ConvertError(f'SRC: {path} holds no state dict of tensors')
    return OrderedDict(
        (k[len('module.'):] if k.startswith('module.') else k, v)
        for k, v in ckpt.items() if isinstance(v, torch.Tensor))


def replaced_conv(caps: nn.Module) -> nn.Conv2d:
    """A fresh convolution of the geometry a capsule layer replaced: its
    per-type embedding has the same kernel size, stride, padding, dilation
    and padding mode (as tuples: non-square ones too)."""
    conv = caps.embed
    return nn.Conv2d(caps.in_channels, caps.out_channels, conv.kernel_size,
                     stride=conv.stride, padding=conv.padding,
                     dilation=conv.dilation, bias=caps.bias is not None,
                     padding_mode=conv.padding_mode)


class CapsuleSite:
    """One capsule layer of the model and what it replaced: the stock
    convolution (teacher) and the BN that follows it in its block, in a
    stock copy (teacher) and the model's own (student, fitted)."""

    def __init__(self, model: nn.Module, name: str, caps: HGWCaps):
        self.name, self.caps = name, caps
        parent_name, _, self.attr = name.rpartition('.')
        self.parent = model.get_submodule(parent_name)
        self.conv = replaced_conv(caps)
        self.norm_attr = self._norm_attr()
        self.norm = (getattr(self.parent, self.norm_attr)
                     if self.norm_attr else None)
        self.stock_norm = None
        # Backbones that renew the norm after a capsule layer name it
        # ``hgw_<stock name>``; SRC has it under the stock name.
        stock_attr = self.norm_attr or ''
        if stock_attr.startswith(CAPSULE_NORM_PREFIX):
            stock_attr = stock_attr[len(CAPSULE_NORM_PREFIX):]
        head = f'{parent_name}.' if parent_name else ''
        self.norm_renames = {
            f'{head}{self.norm_attr}.': f'{head}{stock_attr}.'
        } if self.norm else {}

    def _norm_attr(self) -> Optional[str]:
        # mmcv ConvModule: conv -> norm (its ``norm_name``).
        if self.attr == 'conv' and hasattr(self.parent, 'norm_name'):
            return self.parent.norm_name or None
        # mmdet / mmseg BasicBlock and Bottleneck: convN -> normN.
        if self.attr.startswith('conv') and self.attr[4:].isdigit():
            return getattr(self.parent, f'norm{self.attr[4:]}_name', None)
        return None

    def stock_keys(self, prefix: str) -> Dict[str, torch.Size]:
        keys = {f'{prefix}{self.name}.weight': self.conv.weight.shape}
        if self.conv.bias is not None:
            keys[f'{prefix}{self.name}.bias'] = self.conv.bias.shape
        return keys

    def load_stock(self, state: Dict[str, torch.Tensor], src_key):
        """Take the stock convolution from ``state`` (``src_key`` maps a
        model key to its SRC key)."""
        self.conv.weight.data.copy_(state[src_key(f'{self.name}.weight')])
        if self.conv.bias is not None:
            self.conv.bias.data.copy_(state[src_key(f'{self.name}.bias')])
        self.conv.requires_grad_(False)
        if self.norm is not None:
            # The model's BN now holds the stock values (copied with the
            # other layers); keep them as the teacher's.
            self.stock_norm = copy.deepcopy(self.norm).requires_grad_(False)

    def use_stock(self):
        setattr(self.parent, self.attr, self.conv)
        if self.norm is not None:
            setattr(self.parent, self.norm_attr, self.stock_norm)

    def use_capsules(self):
        setattr(self.parent, self.attr, self.caps)
        if self.norm is not None:
            setattr(self.parent, self.norm_attr, self.norm)

    def teacher(self, x):
        y = self.conv(x)
        return self.stock_norm(y) if self.norm is not None else y

    def student(self, x):
        y = self.caps(x)
        return self.norm(y) if self.norm is not None else y


def stock_key_mapper(sites: List[CapsuleSite]):
    """Model key -> the key of the same tensor in the stock model (the
    renewed norms after capsule layers under their stock names)."""
    renames = {}
    for site in sites:
        renames.update(site.norm_renames)

    def stock_key(key: str) -> str:
        for new, old in renames.items():
            if key.startswith(new):
                return old + key[len(new):]
        return key

    return stock_key


def stage_of(model: nn.Module, name: str) -> str:
    """The innermost ``nn.Sequential`` / ``nn.ModuleList`` holding ``name``
    (a ResNet's ``layer3``, a UNet block's ``convs``); the model itself if
    none."""
    parts = name.split('.')
    for i in range(len(parts) - 1, 0, -1):
        prefix = '.'.join(parts[:i])
        if isinstance(model.get_submodule(prefix),
                      (nn.Sequential, nn.ModuleList)):
            return prefix
    return ''


def match_source(model: nn.Module, sites: List[CapsuleSite],
                 state: Dict[str, torch.Tensor], src: str, config: str):
    """Find which part of the model SRC covers.

    Returns ``(scope, src_prefix)``: the model's submodule name ('' for the
    whole model) and the prefix of its keys in SRC. Raises
    :class:`ConvertError` naming SRC when no part matches exactly.
    """
    caps_names = [s.name for s in sites]
    model_state = model.state_dict()
    stock_key = stock_key_mapper(sites)

    def expected(scope):
        head = f'{scope}.' if scope else ''
        keys = {}
        for key, value in model_state.items():
            if not key.startswith(head) or key.endswith('num_batches_tracked'):
                continue
            if any(key.startswith(c + '.') for c in caps_names):
                continue
            keys[stock_key(key)] = value.shape
        for site in sites:
            if site.name.startswith(head):
                keys.update(site.stock_keys(''))
        return keys

    candidates = []
    if any(k.startswith('backbone.') for k in state):
        candidates += [('', ''), ('backbone', 'backbone.')]
    elif hasattr(model, 'backbone'):
        candidates.append(('backbone', ''))
    else:
        candidates.append(('', ''))
    report = []
    for scope, src_prefix in candidates:
        head = f'{scope}.' if scope else ''
        want = expected(scope)
        missing, wrong = [], []
        for key, shape in want.items():
            src_key = src_prefix + key[len(head):]
            if src_key not in state:
                missing.append(src_key)
            elif state[src_key].shape != shape:
                wrong.append(f'{src_key}: {tuple(state[src_key].shape)} in '
                             f'SRC, {tuple(shape)} in the model')
        if not missing and not wrong:
            if not any(s.name.startswith(head) for s in sites):
                raise ConvertError(
                    f'SRC: {src} covers the {scope or "whole"} model of '
                    f'{config}, which has no HGW capsule layer')
            return scope, src_prefix
        report.append(
            f'as the {scope or "whole model"}: {len(missing)} of '
            f'{len(want)} keys missing (e.g. {", ".join(missing[:3])})' +
            (f', {len(wrong)} of other shape (e.g. {wrong[0]})'
             if wrong else ''))
    raise ConvertError(
        f'SRC: {src} is not a checkpoint of the stock counterpart of '
        f'{config}: ' + '; '.join(report))


# ------------------------------------------------------------------- images
def builtin_images(out_dir: str, count: int, seed: int) -> str:
    """Generate the built-in sets' images (shapes and lesions, half each)
    under ``out_dir``; returns the folder."""
    from mmhgw.datasets.synthetic import make_coco_instances, make_isic_lesions
    half = max(1, count // 2)
    make_coco_instances(osp.join(out_dir, 'coco'), num_train=half, num_val=1,
                        seed=seed)
    make_isic_lesions(osp.join(out_dir, 'isic'), num_train=count - half,
                      num_val=1, seed=seed)
    return out_dir


def load_images(folder: str, count: int, size: Tuple[int, int],
                seed: int) -> Tuple[torch.Tensor, List[str]]:
    """Up to ``count`` images of ``folder`` (recursively, a seeded random
    choice when there are more), resized to ``size`` (H, W); uint8 BGR
    [N, 3, H, W]."""
    if not osp.isdir(folder):
        raise ConvertError(f'--images: no such folder: {folder}')
    paths = sorted(
        p for p in glob.glob(osp.join(folder, '**', '*'), recursive=True)
        if p.lower().endswith(IMAGE_EXTS))
    if not paths:
        raise ConvertError(f'--images: no {"/".join(IMAGE_EXTS)} images '
                           f'under {folder}')
    if len(paths) > count:
        rng = np.random.default_rng(seed)
        paths = sorted(rng.choice(paths, count, replace=False).tolist())
    images = []
    for path in paths:
        img = cv2.imread(path, cv2.IMREAD_COLOR)
        if img is None:
            raise ConvertError(f'--images: cannot read {path}')
        img = cv2.resize(img, (size[1], size[0]),
                         interpolation=cv2.INTER_LINEAR)
        images.append(torch.from_numpy(img).permute(2, 0, 1))
    return torch.stack(images), paths


def normalizer(model: nn.Module):
    """The model's own input normalisation (its data preprocessor's mean,
    std and channel order), as a function of a uint8 BGR batch."""
    dp = getattr(model, 'data_preprocessor', None)
    mean = getattr(dp, 'mean', None)
    std = getattr(dp, 'std', None)
    to_rgb = any(
        bool(getattr(dp, name, False))
        for name in ('_channel_conversion', 'channel_conversion', 'to_rgb'))
    enabled = getattr(dp, '_enable_normalize', mean is not None)

    def apply(batch: torch.Tensor) -> torch.Tensor:
        x = batch.float()
        if to_rgb:
            x = x.flip(1)
        if enabled and mean is not None:
            x = (x - mean.view(1, -1, 1, 1).to(x)) / std.view(1, -1, 1,
                                                              1).to(x)
        return x

    return apply


# -------------------------------------------------------------------- fitting
def relative_error(site: CapsuleSite, inputs: torch.Tensor, batch_size: int,
                   device) -> float:
    num = den = 0.0
    with torch.no_grad():
        for i in range(0, len(inputs), batch_size):
            x = inputs[i:i + batch_size].to(device)
            y = site.teacher(x)
            num += (site.student(x) - y).pow(2).sum().item()
            den += y.pow(2).sum().item()
    return (num / max(den, 1e-30))**0.5


def fit_norm(site: CapsuleSite, inputs: torch.Tensor, batch_size: int, device):
    """Fit the BN after the capsule layer in closed form: per channel, the
    least-squares affine map from the capsule output ``z`` to the stock
    output ``y`` (``a = cov(z, y) / var(z)``, ``b = E[y] - a E[z]``), with
    the running statistics set to those of ``z``. Then the BN computes that
    map in eval mode and (nearly) the same in train mode, with batch
    statistics, when fine-tuning starts; and the fit can only lower the
    error below that of the constant per-channel mean."""
    bn = site.norm
    if not isinstance(bn, nn.modules.batchnorm._BatchNorm) or not bn.affine:
        return
    sums = dict(z=0., zz=0., y=0., zy=0.)
    count = 0
    with torch.no_grad():
        for i in range(0, len(inputs), batch_size):
            x = inputs[i:i + batch_size].to(device)
            z, y = site.caps(x).double(), site.teacher(x).double()
            sums['z'] = sums['z'] + z.sum((0, 2, 3))
            sums['zz'] = sums['zz'] + z.pow(2).sum((0, 2, 3))
            sums['y'] = sums['y'] + y.sum((0, 2, 3))
            sums['zy'] = sums['zy'] + (z * y).sum((0, 2, 3))
            count += z.shape[0] * z.shape[2] * z.shape[3]
        mean_z, mean_y = sums['z'] / count, sums['y'] / count
        var_z = (sums['zz'] / count - mean_z.pow(2)).clamp(min=0)
        cov = sums['zy'] / count - mean_z * mean_y
        # A channel the capsule layer leaves constant gets its mean.
        a = torch.where(var_z > 1e-12, cov / var_z.clamp(min=1e-12),
                        torch.zeros_like(cov))
        b = mean_y - a * mean_z
        bn.running_mean.copy_(mean_z)
        bn.running_var.copy_(var_z)
        bn.weight.copy_(a * torch.sqrt(var_z + bn.eps))
        bn.bias.copy_(b + a * mean_z)


def fit_site(site: CapsuleSite, inputs: torch.Tensor, steps: int,
             batch_size: int, lr: float, device, seed: int):
    """The BN in closed form (:func:`fit_norm`), then Adam on the capsule
    layer and the BN's affine parameters, MSE to the stock output, BN in
    eval mode (an affine map: the fitted function is the one the converted
    model computes), then the BN in closed form again."""
    fit_norm(site, inputs, batch_size, device)
    # Backward keeps the forward's tensors instead of recomputing them: a
    # fitting batch is small, and this halves the time of a step.
    recompute = getattr(site.caps, 'recompute', None)
    if recompute is not None:
        site.caps.recompute = 'none'
    params = list(site.caps.parameters())
    if site.norm is not None:
        params += [p for p in site.norm.parameters()]
    for p in params:
        p.requires_grad_(True)
    optim = torch.optim.Adam(params, lr=lr)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(optim, steps)
    gen = torch.Generator().manual_seed(seed)
    with progress(steps) as step:
        for _ in range(steps):
            idx = torch.randint(len(inputs), (min(batch_size, len(inputs)), ),
                                generator=gen)
            x = inputs[idx].to(device)
            with torch.no_grad():
                y = site.teacher(x)
            loss = F.mse_loss(site.student(x), y)
            optim.zero_grad()
            loss.backward()
            optim.step()
            sched.step()
            step()
    if recompute is not None:
        site.caps.recompute = recompute
    fit_norm(site, inputs, batch_size, device)


def capture_inputs(model, forward, sites: List[CapsuleSite], images, normalize,
                   batch_size: int, device) -> Dict[str, list]:
    """Inputs of ``sites`` (running as stock convolutions) over all images."""
    cache = {s.name: [] for s in sites}

    def keep_input(name):
        return lambda mod, args, out: cache[name].append(args[0].detach().cpu(
        ))

    handles = [s.conv.register_forward_hook(keep_input(s.name)) for s in sites]
    batches = (len(images) + batch_size - 1) // batch_size
    with torch.no_grad(), progress(batches) as step:
        for i in range(0, len(images), batch_size):
            forward(normalize(images[i:i + batch_size]).to(device))
            step()
    for h in handles:
        h.remove()
    return {name: torch.cat(xs) for name, xs in cache.items()}


def convert(src: str, config: str, out: str, images: Optional[str] = None,
            num_images: int = 256, img_size: Tuple[int, int] = (128, 160),
            steps: int = 300, batch_size: int = 16, lr: float = 3e-3,
            device: str = 'cpu', seed: int = 0,
            cfg_options: Optional[dict] = None) -> dict:
    """Everything the command line does; returns the per-layer errors
    ``{layer: dict(before=..., after=...)}`` (also in ``OUT['meta']``)."""
    if not osp.isfile(config):
        raise ConvertError(f'CONFIG: no such file: {config}')
    if steps < 0 or num_images < 1 or batch_size < 1:
        raise ConvertError('--steps must be >= 0, --num-images and '
                           '--batch-size >= 1')
    if min(img_size) < 32 or img_size[0] % 32 or img_size[1] % 32:
        raise ConvertError(f'--img-size {img_size}: both sides must be '
                           f'positive multiples of 32 (the backbones '
                           f'downsample by up to 32)')
    try:
        check_number('--lr', lr, POSITIVE)
    except ValueError as err:
        raise ConvertError(str(err))
    try:
        device = torch.device(device)
    except RuntimeError as err:
        raise ConvertError(f'--device {device!r}: {err}')
    if device.type == 'cuda' and not torch.cuda.is_available():
        raise ConvertError(f'--device {device}: CUDA is not available here')
    torch.manual_seed(seed)
    state = read_state_dict(src)
    cfg = load_offline_config(config)
    try:
        merge_cfg_options(cfg, cfg_options)
    except ValueError as e:
        raise ConvertError(str(e))
    model = build_config_model(cfg, init=True)
    sites = [
        CapsuleSite(model, name, m) for name, m in model.named_modules()
        if isinstance(m, HGWCaps)
    ]
    if not sites:
        raise ConvertError(f'CONFIG: {config} builds no HGW capsule layer')
    scope, src_prefix = match_source(model, sites, state, src, config)
    head = f'{scope}.' if scope else ''
    caps_names = [s.name for s in sites]
    # Copy every stock layer (the capsule layers' BNs included).
    own = model.state_dict()
    stock_key = stock_key_mapper(sites)
    src_key = {
        k: src_prefix + stock_key(k)[len(head):]
        for k in own if k.startswith(head) and not any(
            k.startswith(c + '.') for c in caps_names)
    }
    loaded = {k: state[v] for k, v in src_key.items() if v in state}
    model.load_state_dict(loaded, strict=False)
    outside = [s.name for s in sites if not s.name.startswith(head)]
    if outside:
        print(f'{len(outside)} capsule layers lie outside what SRC covers '
              f'and stay random: {", ".join(outside)}')
    sites = [s for s in sites if s.name.startswith(head)]
    for site in sites:
        site.load_stock(state, lambda key: src_prefix + key[len(head):])
    model.to(device).eval()
    for site in sites:
        site.conv.to(device)
        if site.stock_norm is not None:
            site.stock_norm.to(device)
    model.requires_grad_(False)

    forward = model.extract_feat if hasattr(model, 'extract_feat') else model
    normalize = normalizer(model)
    with tempfile.TemporaryDirectory() as tmp:
        folder = images or builtin_images(tmp, num_images, seed)
        batch, _ = load_images(folder, num_images, img_size, seed)
    source_images = images or f'built-in generated sets (seed {seed})'
    print(f'{len(batch)} images from {source_images}, {img_size[0]}x'
          f'{img_size[1]}; {len(sites)} capsule layers to fit')

    # Stage order: the order in which a stock forward pass reaches them.
    for site in sites:
        site.use_stock()
    order = []
    hooks = [
        s.conv.register_forward_hook(lambda *_, name=s.name: order.append(name)
                                     if name not in order else None)
        for s in sites
    ]
    with torch.no_grad():
        forward(normalize(batch[:1]).to(device))
    for h in hooks:
        h.remove()
    by_name = {s.name: s for s in sites}
    stages = OrderedDict()
    for name in order:
        stages.setdefault(stage_of(model, name), []).append(by_name[name])

    errors = OrderedDict()
    for stage, members in stages.items():
        print(f'stage {stage or "(model)"}: caching the inputs of '
              f'{len(members)} layers')
        inputs = capture_inputs(model, forward, members, batch, normalize,
                                batch_size, device)
        for site in members:
            x = inputs[site.name]
            site.use_capsules()
            before = relative_error(site, x, batch_size, device)
            start = time.perf_counter()
            print(f'  {site.name}: fitting {steps} steps')
            fit_site(site, x, steps, batch_size, lr, device, seed)
            after = relative_error(site, x, batch_size, device)
            errors[site.name] = dict(before=before, after=after)
            print(f'  {site.name}: relative error {before:.4f} -> '
                  f'{after:.4f} ({time.perf_counter() - start:.0f} s)')
        del inputs
    for site in sites:
        site.use_capsules()

    target = model.get_submodule(scope) if scope else model
    out_state = OrderedDict(
        (k, v.detach().cpu()) for k, v in target.state_dict().items())
    meta = dict(source=osp.abspath(src), config=osp.abspath(config),
                scope=scope or 'model', converter='capsules_from_stock',
                mmhgw_version=mmhgw.__version__, images=source_images,
                num_images=len(batch), img_size=list(img_size), steps=steps,
                lr=lr, seed=seed, relative_error=dict(errors))
    os.makedirs(osp.dirname(osp.abspath(out)), exist_ok=True)
    torch.save(dict(state_dict=out_state, meta=meta), out)
    print('\nlayer                                     before    after')
    for name, err in errors.items():
        print(f'{name:40s} {err["before"]:8.4f} {err["after"]:8.4f}')
    print(f'saved {out} ({scope or "whole model"}; load it with ' +
          ('model.backbone.init_cfg=dict(type="Pretrained", '
           f'checkpoint="{out}")' if scope ==
           'backbone' else f'load_from="{out}"') + ')')
    return errors


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        description='Stock checkpoint -> HGWCaps checkpoint by layer-wise '
        'distillation of the capsule layers.')
    parser.add_argument('src', help='checkpoint of the stock model')
    parser.add_argument('config', help='the HGWCaps config to convert for')
    parser.add_argument('out', help='where to write the HGWCaps checkpoint')
    parser.add_argument(
        '--images', help='folder of unlabeled images '
        '(default: the built-in generated sets)')
    parser.add_argument('--num-images', type=int, default=256)
    parser.add_argument('--img-size', type=int, nargs=2, default=(128, 160),
                        metavar=('H', 'W'))
    parser.add_argument('--steps', type=int, default=300,
                        help='Adam steps per capsule layer')
    parser.add_argument('--batch-size', type=int, default=16)
    parser.add_argument('--lr', type=float, default=3e-3)
    parser.add_argument('--device', default='cpu')
    parser.add_argument('--seed', type=int, default=0)
    parser.add_argument('--cfg-options', nargs='+', default=[],
                        help='key=value overrides of CONFIG')
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    from mmengine.config import DictAction
    options = {}
    if args.cfg_options:
        ns = argparse.Namespace()
        DictAction(option_strings=[], dest='o')(None, ns, args.cfg_options)
        options = ns.o
    try:
        convert(args.src, args.config, args.out, images=args.images,
                num_images=args.num_images, img_size=tuple(args.img_size),
                steps=args.steps, batch_size=args.batch_size, lr=args.lr,
                device=args.device, seed=args.seed, cfg_options=options)
    except ConvertError as e:
        raise SystemExit(f'capsules_from_stock: error: {e}')


if __name__ == '__main__':
    main()
