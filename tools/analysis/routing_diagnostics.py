"""What the capsule layers of a model do on real batches: routing
statistics and where the gradient comes from.

For a config (optionally with a checkpoint) and a few training batches of
its data, prints and writes as JSON:

- per capsule layer: the plans' row entropy (0: every component sent to
  one part, 1: spread evenly), how many output types are active per
  location (activation > 1/2), the spread of the HGW distances over output
  types, how much distances and activations vary over locations (the
  input) against over types, the share of saturated cross costs
  (``K > 0.99``), the mean squared size of components and subcapsule
  parts, E's value, and how far the plan moves the distances from those
  of the uniform plan ``p q^T`` on the same input (the correlation of the
  two distances' deviations from their mean over types, the locations
  where both pick the same best-aligned type, and the mean change of the
  activations): what HGW routing tells the next layer that uniform
  routing would not; how far the plans' correspondence depends on the
  input (the share of locations where a component goes to the part it
  goes to most often, and how far the distances at that layer's mean plan,
  one plan per output type for every location, follow the HGW distances);
  how far the plan's barycentric parts lie from the
  components' mean (the parts of the default pose) and, for layers with
  ``pose_from='mean_plus_plan'`` (``'mean_plus_components'``, or both),
  how large the pose of the parts' (components') offsets is beside the
  mean's pose;
- per part of the network (backbone stages before, at and after the
  capsules; heads): the gradient norm of the task loss alone and of the
  task loss with the regulariser E, so that one sees which parameters E
  trains and how strongly beside the task (the capsule layers' parameters
  by role: component embedding, subcapsules, pose map).

    python tools/analysis/routing_diagnostics.py CONFIG [--checkpoint CKPT]
        [--batches 2] [--beta 0.5] [--out diag.json] [--cfg-options k=v ...]

``--beta`` sets the capsules' beta (the warm-up's final value by default;
a fresh model would otherwise sit at the warm-up's start).
"""
import argparse
import json
import math
from collections import defaultdict

import torch
from mmengine.config import DictAction

from mmhgw.arg_checks import check_unit
from mmhgw.config_utils import check_arg, check_files


def layer_statistics(layer, x) -> dict:
    """Routing statistics of one HGWCaps layer on its input ``x``."""
    from mmhgw.models.layers.hgw_caps import activation
    with torch.no_grad():
        r = layer.route(x)
        dist, plan = r['distance'], r['plan']
        rows = plan / plan.sum(-1, keepdim=True)
        row_entropy = -(rows * rows.clamp_min(1e-30).log()).sum(-1)
        act = activation(dist, layer.temperature)
        K = r['cross_cost']
        return dict(
            **input_dependence(dist, act),
            row_entropy=(row_entropy / math.log(plan.shape[-1])).mean().item(),
            active_types=(act > 0.5).float().sum(-1).mean().item(),
            out_types=layer.out_types,
            distance_spread=(dist.max(-1)[0] - dist.min(-1)[0]).mean().item(),
            saturated_cross_cost=(K > 0.99).float().mean().item(),
            component_sq=r['components'].pow(2).mean().item(),
            subcapsule_sq=layer.subcapsules.pow(2).mean().item(),
            regulariser=r['regulariser'].item(),
            **distance_agreement('uniform', dist,
                                 layer.route(x, routing='uniform')['distance'],
                                 layer.temperature),
            **plan_input_dependence(layer, x, dist, plan),
            **part_offsets(layer, r['components'], plan))


def part_offsets(layer, X_p, plan) -> dict:
    """How far the plan's barycentric parts ``V_q T^T X_p`` [B, L, N, V_q,
    d] lie from the components' mean ``m = p^T X_p``, the parts of the
    default pose and of uniform routing, for components X_p [B, L, V_p, d]
    and plans [B, L, N, V_p, V_q].

    ``plan_part_offset``: ``sum ||parts - m|| / sum ||m||`` over all
    (image, location, type), norms over the parts of one type (0 under
    uniform routing). With ``pose_from='mean_plus_plan'`` also
    ``offset_pose_share``: the same ratio of the offsets' pose
    ``W_r (parts - m)`` to the mean's pose ``W m``, i.e. how much of the
    layer's pose the task has opened to the plan; with
    ``'mean_plus_components'``, the same of the components' offsets' pose;
    with both, of the two offsets' poses together, and each alone as
    ``plan_offset_pose_share`` and ``component_offset_pose_share``.
    """
    from mmhgw.models.layers.hgw_caps import component_offset_pose, mean_pose
    from mmhgw.ops import pose_map
    V_q = plan.shape[-1]
    parts = V_q * torch.einsum('blnpq,blpd->blnqd', plan, X_p)
    mean = X_p.mean(-2)[:, :, None, None, :]
    offset = parts - mean
    out = dict(plan_part_offset=(offset.flatten(-2).norm(dim=-1).sum() /
                                 mean.expand_as(parts).flatten(-2).norm(
                                     dim=-1).sum().clamp_min(1e-30)).item())
    extras = {}
    if 'plan' in layer.pose_offsets:
        extras['plan'] = pose_map(offset, layer.plan_pose_weight)
    if 'components' in layer.pose_offsets:
        extras['component'] = component_offset_pose(
            X_p, layer.component_pose_weight)
    if not extras:
        return out
    base = mean_pose(X_p,
                     layer.pose_weight).norm(dim=-1).sum().clamp_min(1e-30)

    def share(pose):
        return (pose.norm(dim=-1).sum() / base).item()

    out['offset_pose_share'] = share(sum(extras.values()))
    if len(extras) > 1:
        out.update(
            {f'{k}_offset_pose_share': share(v)
             for k, v in extras.items()})
    return out


def distance_agreement(name, dist, other, temperature) -> dict:
    """How HGW distances ``dist`` differ from the distances ``other``
    [B, L, N] of the same layer and input at another plan (``name``: the
    uniform plan, the mean plan), under keys prefixed ``name``.

    The activations compare distances across types at one location, so
    what matters is each one's deviation from its mean over types:
    ``<name>_correlation`` is the correlation of those deviations over
    all (image, location, type) entries (1: the plan adds nothing the
    activations could see beyond a scale); ``<name>_same_best_type``,
    the share of locations whose best-aligned type (smallest distance)
    is the same; ``<name>_activation_change``, the mean absolute change
    of the activations ``exp(-(d - min d) / temperature)``.
    """
    from mmhgw.models.layers.hgw_caps import activation
    a = dist - dist.mean(-1, keepdim=True)
    b = other - other.mean(-1, keepdim=True)
    corr = (a * b).sum() / (a.norm() * b.norm()).clamp_min(1e-30)
    same_best = (dist.argmin(-1) == other.argmin(-1)).float().mean()
    change = (activation(dist, temperature) -
              activation(other, temperature)).abs().mean()
    return {
        f'{name}_correlation': corr.item(),
        f'{name}_same_best_type': same_best.item(),
        f'{name}_activation_change': change.item()
    }


def plan_input_dependence(layer, x, dist, plan) -> dict:
    """How much of the plans [B, L, N, V_p, V_q] the input decides.

    ``assignment_stability``: for each output type and component, the
    part it sends most mass to (its row's argmax) is compared with the
    part it goes to most often over all images and locations; the share
    of agreeing (image, location, type, component) entries (1: one fixed
    grouping of the components per output type, whatever the input;
    about ``1 / V_q`` for an assignment drawn at random).
    ``mean_plan_*``: :func:`distance_agreement` of the HGW distances with
    the distances at the mean plan of each output type over images and
    locations (a plan that ignores the input).
    """
    from mmhgw.analysis.plans import distance_at_plan
    V_q = plan.shape[-1]
    best = plan.argmax(-1)  # [B, L, N, V_p]
    counts = torch.nn.functional.one_hot(best, V_q).flatten(0, 1).sum(0)
    mode = counts.argmax(-1)  # [N, V_p]
    fixed = distance_at_plan(layer, x, plan.mean((0, 1)))
    return dict(
        assignment_stability=(best == mode).float().mean().item(),
        **distance_agreement('mean_plan', dist, fixed, layer.temperature))


def input_dependence(dist, act) -> dict:
    """How much the routing depends on the input, from the distances and
    activations [B, L, N] of B images at L locations to N output types.

    ``distance_std_locations``: the standard deviation over locations of
    one type's distance (mean over types and images): what the input
    changes; ``distance_std_types``: the standard deviation over types at
    one location (mean over locations): what tells types apart. An output
    length that barely varies over locations carries no information about
    the input (``activation_std_locations``, with the activation in (0, 1]).
    """
    return dict(distance_std_locations=dist.std(1).mean().item(),
                distance_std_types=dist.std(2).mean().item(),
                activation_std_locations=act.std(1).mean().item())


def section_of(name: str, capsule_names) -> str:
    """Which part of the network a parameter belongs to, by name; capsule
    layers' parameters by role (``embed``, ``subcapsules``,
    ``pose_weight``, ``bias``), since the routing reaches each by another
    path: the subcapsules, for one, only through the distances and E."""
    for caps in capsule_names:
        if name.startswith(caps + '.'):
            role = name[len(caps) + 1:].split('.')[0]
            return f'capsule layers ({role})'
    return name.split('.')[0] if not name.startswith('backbone.') else \
        'backbone (' + '.'.join(name.split('.')[1:3]) + ')'


def gradient_norms(model, inputs, samples, capsule_names, with_reg: bool):
    """Gradient norm per network part of the summed losses, with or without
    the capsules' regulariser E (and their alignment term, where the layers
    train with one: both ride the same injected loss).

    Without E, E is still computed but its injected gradient is scaled by 0
    (the layers' ``loss_scale``), so that both passes run the same forward
    code: with ``reg_weight = 0`` a layer may form its structures by another
    implementation (equal to float rounding), which would move the task's
    gradient too."""
    from mmhgw.models import HGWCaps
    saved = {}
    for m in model.modules():
        if isinstance(m, HGWCaps):
            saved[m] = m.loss_scale
            if not with_reg:
                m.loss_scale = 0.0
    model.zero_grad()
    try:
        losses = model.loss(inputs, samples)
        sum(v for k, v in losses.items() if 'loss' in k).backward()
    finally:
        for m, scale in saved.items():
            m.loss_scale = scale
    squares = defaultdict(float)
    for name, p in model.named_parameters():
        if p.grad is not None:
            squares[section_of(name, capsule_names)] += \
                p.grad.pow(2).sum().item()
    model.zero_grad()
    return {k: v**0.5 for k, v in squares.items()}


def diagnose(cfg, checkpoint=None, batches=2, beta=None) -> dict:
    from mmengine.registry import init_default_scope
    from mmengine.runner import Runner

    from mmhgw.config_utils import build_config_model
    from mmhgw.engine import load_fitting_weights
    from mmhgw.models import HGWCaps
    init_default_scope(cfg.get('default_scope', 'mmengine'))
    model = build_config_model(cfg, init=checkpoint is None)
    if checkpoint:
        load_fitting_weights(model, checkpoint)
    model.train()
    layers = {n: m for n, m in model.named_modules() if isinstance(m, HGWCaps)}
    if not layers:
        raise SystemExit('the model has no HGWCaps layer to diagnose')
    for m in layers.values():
        if beta is not None:
            m.beta.fill_(beta)
    captured = {}
    hooks = [
        m.register_forward_hook(
            lambda mod, inp, out, name=n: captured.__setitem__(name, inp[0]))
        for n, m in layers.items()
    ]
    loader = Runner.build_dataloader(cfg.train_dataloader)
    stats = defaultdict(list)
    grads = defaultdict(lambda: defaultdict(list))
    for i, batch in zip(range(batches), loader):
        data = model.data_preprocessor(batch, training=True)
        for with_reg in (False, True):
            key = 'task + E' if with_reg else 'task'
            norms = gradient_norms(model, data['inputs'], data['data_samples'],
                                   list(layers), with_reg)
            for part, value in norms.items():
                grads[part][key].append(value)
        for name, layer in layers.items():
            stats[name].append(layer_statistics(layer, captured[name]))
    for h in hooks:
        h.remove()
    mean = lambda xs: sum(xs) / len(xs)  # noqa: E731
    return dict(
        layers={
            n: {k: mean([s[k] for s in runs])
                for k in runs[0]}
            for n, runs in stats.items()
        }, gradients={
            part: {k: mean(v)
                   for k, v in by.items()}
            for part, by in grads.items()
        })


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('config')
    parser.add_argument('--checkpoint')
    parser.add_argument('--batches', type=int, default=2)
    parser.add_argument('--beta', type=float, default=None)
    parser.add_argument('--out', help='JSON file to write')
    parser.add_argument('--cfg-options', nargs='+', action=DictAction)
    args = parser.parse_args(argv)
    if args.batches < 1:
        parser.error(f'--batches must be >= 1, got {args.batches}')
    if args.beta is not None:
        check_arg(parser, check_unit, '--beta', args.beta)
    if args.checkpoint:
        check_files(parser, [('--checkpoint', args.checkpoint)])
    return args


def main(argv=None):
    args = parse_args(argv)
    import mmhgw  # noqa: F401
    from mmhgw.config_utils import load_offline_config, merge_cfg_options
    cfg = load_offline_config(args.config)
    merge_cfg_options(cfg, args.cfg_options)
    if args.beta is None:
        args.beta = cfg.model.backbone.get('hgw_cfg', {}).get('beta')
    result = diagnose(cfg, args.checkpoint, args.batches, args.beta)
    for name, s in result['layers'].items():
        print(name, ' '.join(f'{k}={v:.4g}' for k, v in s.items()))
    for part, by in sorted(result['gradients'].items()):
        print(f'{part:28s}', ' '.join(f'{k}: {v:.3e}' for k, v in by.items()))
    if args.out:
        with open(args.out, 'w') as f:
            json.dump(result, f, indent=2)
    return result


if __name__ == '__main__':
    main()
