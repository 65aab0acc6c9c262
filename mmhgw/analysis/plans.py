"""Capsule layers at a given transport plan instead of the solved one: what
is left of HGW routing when the plan no longer depends on the input.

Used by ``tools/analysis/routing_diagnostics.py`` (how far the distances at
one plan per output type follow the HGW distances) and
``tools/analysis/routing_knockout.py`` (a trained model tested with each
layer routed by its mean plan).
"""
from typing import Dict, Iterable, Optional

import torch
from torch import Tensor


def distance_at_plan(layer, x: Tensor, plan: Tensor,
                     components: Optional[Tensor] = None) -> Tensor:
    """The HGW value (Eq. 21) ``<L(C_p, C_q) (x) T, T> + beta <K, T>`` of
    ``layer``'s problems on its input ``x`` [B, C, H, W] at the plan ``T``
    [..., out_types, V_p, V_q], broadcast over images and locations (one
    plan per output type, or the layer's own plans [B, L, out_types, V_p,
    V_q]), instead of the solved one: [B, L, out_types]. ``components``:
    the layer's components of ``x`` where the caller has formed them."""
    from mmhgw.ops.hgw_routing_reference import cross_cost
    from mmhgw.ot import GWFactors
    from mmhgw.ot.gw_terms import hgw_value
    X_p = layer._components(x)[0] if components is None else components
    B, L, V_p, d = X_p.shape
    s = layer._structures(X_p, layer._observed_p(x))
    f = s.factors()
    # Locations pair with types: [B*L, 1, ...] against [1, N, ...].
    terms = GWFactors(f.row.reshape(-1, 1, V_p), f.col[None],
                      f.h1.reshape(-1, 1, V_p, V_p), f.h2[None]).terms()
    K = cross_cost(X_p.reshape(-1, V_p, d), layer.subcapsules)
    plan = plan.to(K).expand(B, L, *plan.shape[-3:]).reshape(K.shape)
    return hgw_value(terms, K, plan, s.beta).reshape(B, L, -1)


def mean_plans(model, batches: Iterable) -> Dict[str, Tensor]:
    """Each HGWCaps layer's plan averaged over the images and locations of
    ``batches`` (data loader batches, preprocessed as for a training step,
    which pads them to one size), one plan per output type: ``{layer name:
    [out_types, V_p, V_q]}``. The plans are materialised layer by layer: a
    few batches of crops."""
    from mmhgw.models import HGWCaps
    layers = {n: m for n, m in model.named_modules() if isinstance(m, HGWCaps)}
    if not layers:
        raise ValueError('the model has no HGWCaps layer')
    inputs = {}
    hooks = [
        m.register_forward_hook(
            lambda mod, inp, out, name=n: inputs.__setitem__(name, inp[0]))
        for n, m in layers.items()
    ]
    sums, counts = {}, {}
    try:
        with torch.no_grad():
            for batch in batches:
                model(
                    model.data_preprocessor(batch, True)['inputs'],
                    mode='tensor')
                for name, layer in layers.items():
                    plan = layer.route(inputs[name])['plan']
                    sums[name] = sums.get(name, 0) + plan.sum((0, 1))
                    counts[name] = (counts.get(name, 0) +
                                    plan.shape[0] * plan.shape[1])
    finally:
        for h in hooks:
            h.remove()
    if not counts:
        raise ValueError('mean_plans needs at least one batch')
    return {n: sums[n] / counts[n] for n in sums}


def route_at_plan(layer, plan: Tensor) -> None:
    """Route ``layer`` (an HGWCaps whose pose does not read the plan) by
    ``plan`` [out_types, V_p, V_q] at every location from now on: its
    distances, hence its activations, come from that one plan per output
    type; its components, structures and poses are its own. For test-time
    analysis (no regulariser, no alignment term)."""
    if layer.pose_reads_plan:
        raise ValueError('route_at_plan needs a layer whose pose does not '
                         f'read the plan, got pose_from={layer.pose_from!r}')
    expected = (layer.out_types, layer.num_components, layer.num_parts)
    if tuple(plan.shape) != expected:
        raise ValueError(f'plan must have shape {expected} (out_types, '
                         f'components, num_parts), got {tuple(plan.shape)}')

    def forward_terms(x):
        X_p, size = layer._components(x)
        dist = distance_at_plan(layer, x, plan, X_p)
        pose = layer._pose(X_p, None)
        return layer._output(layer._capsules(pose, dist), size), None, dist

    layer.forward_terms = forward_terms
