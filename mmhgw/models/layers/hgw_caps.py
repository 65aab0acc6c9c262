"""The HGW capsule layer: a drop-in for a k x k convolution (paper Sec. 3-4,
Fig. 2, Eq. 18, Eq. 21, Eq. reg, Algorithm 1)."""
import contextlib
import math
from typing import Optional, Tuple

import torch
import torch.nn as nn
from mmcv.cnn import build_conv_layer
from mmengine.logging import print_log
from mmengine.model import BaseModule
from torch import Tensor
from torch.utils.checkpoint import checkpoint

from mmhgw.arg_checks import check_choice
from mmhgw.ops import (BACKENDS, ROUTINGS, cross_cost, hgw_routing,
                       hgw_routing_reference, pose_map, runs_component_kernels)
from mmhgw.ot import GWFactors
from mmhgw.registry import MODELS
from .aux_loss import attach_aux_loss
from .hgw_caps_args import (build_solver_cfg, check_checkpoint_beta,
                            check_layer_args, resolve_legacy)
from .hgw_caps_structures import (RoutingInputs, Structures, layer_factors,
                                  layer_structures, layer_terms,
                                  observed_input, regulariser)
from .position_embedding import PositionEmbedding
from .precision import autocast_off, narrower_than_float32, restore_float32
from .recompute import recomputed_in_backward

#: Added under the square root of the pose norm: no NaN gradient at u = 0.
SAFE_NORM_EPS = 1e-6

#: Added to the mean square of a component before its root is divided out
#: (``component_norm``): a component of zeros (padding) stays zeros.
COMPONENT_NORM_EPS = 1e-6

#: Whether the warning of ``HGWCaps._loss_scale`` was given.
_WARNED_UNSCALED = False


def mean_pose(X_p: Tensor, pose_weight: Tensor) -> Tensor:
    """Poses [B, L, N, O] of the pose map ``pose_weight`` [N, V_q d, O]
    applied to parts that all equal the components' mean (X_p
    [B, L, V_p, d]): the map summed over its parts, applied once."""
    N, K, O = pose_weight.shape
    d = X_p.shape[-1]
    W = pose_weight.view(N, K // d, d, O).sum(1)
    return torch.einsum('bld,ndo->blno', X_p.mean(-2), W)


def component_offset_pose(X_p: Tensor, weight: Tensor) -> Tensor:
    """Poses [B, L, N, O] of the map ``weight`` [N, V_p d, O] applied to
    the components' offsets from their mean, ``vec(X_p - p^T X_p)`` (X_p
    [B, L, V_p, d]): every number of the components, as a convolution's
    output reads its whole patch."""
    offsets = (X_p - X_p.mean(-2, keepdim=True)).flatten(-2)
    return torch.einsum('blk,nko->blno', offsets, weight)


def activation(dist: Tensor, temperature: float) -> Tensor:
    """Activations ``exp(-(d_n - min_m d_m) / temperature)`` in (0, 1] of
    the HGW distances ``dist`` [..., N] to the N output types: a soft
    version of the paper's routing to the minimal distance."""
    return torch.exp(-(dist - dist.min(-1, keepdim=True)[0]) / temperature)


def alignment(dist: Tensor, temperature: float) -> Tensor:
    """``mean over locations of sum_n r_n d_n``, ``r = softmax_n(-d_n /
    temperature)`` held fixed: the HGW distances [..., N] to the output
    types, each weighted by its share of the activations. The weights carry
    no gradient, so the term is lowered only by bringing the components and
    the subcapsules of the types the activations pick closer, never by
    moving the activations to other types."""
    share = torch.softmax(-dist.detach() / temperature, dim=-1)
    return (share * dist).sum(-1).mean()


@MODELS.register_module()
class HGWCaps(BaseModule):
    """Hybrid Gromov-Wasserstein capsules in place of a k x k convolution.

    Channels are type-major capsules: ``in_channels = in_types * in_dim``,
    ``out_channels = out_types * out_dim``. At every output location (the
    same grid as ``nn.Conv2d`` with these ``kernel_size``, ``stride``,
    ``padding`` and ``dilation``):

    1. Components ``X_p`` [V_p, part_dim]: by default (``components=
       'types'``, V_p = in_types) one embedding per input capsule type from
       its k x k patch, by one grouped convolution (``groups = in_types``),
       so no vote tensor is unfolded; with ``components='positions'``
       (V_p = k_h k_w) one per position of the patch, all by one shared map
       (:class:`PositionEmbedding`).
    2. Each output type ``n`` owns a learnable subcapsule ``X_q[n]``
       [V_q = num_parts, part_dim].
    3. Structure ``C = (1 - beta) C_obs + beta K(X, X)`` per domain (Eq. 21),
       ``C_obs`` of Eq. 18 as chosen by ``observed``, cross cost
       ``K(X_p, X_q[n])`` by the bounded distance of
       :func:`mmhgw.ot.embedding_distance`; the HGW distance and the
       barycentric parts (Eq. 24-25) come from the fused op
       :func:`mmhgw.ops.hgw_routing`, which never stores the
       ``B x L x N x V_p x V_q`` plans and solves them again in backward;
       ``beta`` is also the weight of the Wasserstein term ``beta <K, T>``.
    4. Activation ``a_n = exp(-(d_n - min_m d_m) / temperature)`` in
       ``(0, 1]``: a soft version of the paper's routing to the minimal
       distance; the best-aligned type has activation 1.
    5. Pose: a learned per-type linear map to ``out_dim`` of parts
       [V_q, part_dim], rescaled to length ``a_n`` (safe norm). By default
       (``pose_from='mean'``) every part is the components' mean
       ``p^T X_p``, so the plan decides the activations and the pose does
       not depend on it; with ``pose_from='plan'`` the parts are the
       barycentric projection of the components onto the subcapsule's
       parts through the plan, ``V_q T^T X_p`` (mapped inside the fused
       op, so that the parts, larger than the output, are not kept for
       backward); with ``pose_from='mean_plus_plan'`` the mean's pose plus
       a second map of the barycentric parts' offsets from the mean, zero
       at construction (``'mean_plus_components'``: of the components'
       offsets, no plan; ``'mean_plus_components_plus_plan'``: both).
    6. In training, the regulariser ``E = reg_weight * (L(K_pp, C_obs_p) +
       L(K_qq, C_obs_q))`` (Eq. reg; KL loss averaged over off-diagonal
       entries, see :func:`kl_off_diagonal`; ``C_obs`` as the fixed target)
       joins the main loss through
       :func:`~mmhgw.models.layers.aux_loss.attach_aux_loss`, its gradient
       multiplied by ``loss_scale``: the factor the optimiser wrapper
       applies to the task loss (AMP loss scale, accumulation), set before
       each iteration by ``HGWLossScaleHook``; None (no hook) counts as 1.

    Like ``nn.Conv2d`` it takes batched [B, C, H, W] and unbatched
    [C, H, W] input. Its parameters and the solver stay in float32 (or
    wider) when the model is converted with ``.half()`` / ``.bfloat16()``
    or run under autocast: the input is cast up and the output back to the
    input's dtype (16-bit Sinkhorn iterations give wrong plans).

    Args:
        in_channels, out_channels, kernel_size, stride, padding, dilation:
            as ``nn.Conv2d``.
        groups: must be 1 (capsule types replace channel groups).
        bias: add a learnable per-channel bias to the output.
        padding_mode: as ``nn.Conv2d`` (``'zeros'``, ``'reflect'``,
            ``'replicate'`` or ``'circular'``): how the patches of the
            embedding (and of the counted observed structure) are padded.
        in_types: input capsule types (= V_p, the components, unless
            ``components='positions'``).
        out_types: output capsule types (one subcapsule each).
        num_parts: parts per subcapsule (V_q).
        part_dim: embedding size of components and parts. These four are
            positive ints; with ``in_types`` or ``num_parts`` 1 the
            structure of that side has no off-diagonal entry and its term
            of the regulariser is 0.
        solver_cfg: dict of the solver (as mmdet's ``norm_cfg``): ``eps``
            (the proximal step; paper: 1e-3), ``outer_iters``,
            ``inner_iters``, ``grad`` (``'envelope'`` or ``'unroll'``) and
            ``regularizer`` (``'proximal'``, or ``'entropic'``: ablation A),
            as :func:`mmhgw.ot.hgw_distance`. Missing keys take
            :data:`~.hgw_caps_args.SOLVER_DEFAULTS` (why: README, "What the
            plan is, and is not"); unknown keys raise.
        beta: final weight of the embeddings in the structures and of the
            Wasserstein term (Eq. 21, one weight as in the paper); the
            current value is the buffer ``beta``, ramped by
            ``HGWBetaWarmupHook``.
        reg_weight: lambda of Eq. reg (paper: 10); finite, >= 0.
        routing: ``'hgw'``, or ``'uniform'`` (plan fixed to ``p q^T``: no
            optimal transport, the baseline routing must beat).
        use_observed: False for the paper's ablation C: no observed
            structure anywhere. Both structures are the embeddings' alone,
            ``C = K(X, X)`` (the paper's mixing weight 1), and E's target is
            Eq. 18 with no interaction observed, ``c_ij = 1`` (E keeps its
            weight; ``reg_weight=0`` removes it: ablation B). The
            Wasserstein weight stays ``beta`` (ramped to its final value as
            in the other variants), so only the use of observed data
            changes.
        observed: the observed structure ``C_obs`` of the input domain
            (Eq. 18). ``'coactivation'``: ``w_ij = a_i a_j`` from the
            presence of the components themselves
            (:func:`zipf_structure`); ``'counts'``: ``w_ij`` counts the
            positions of the k x k input patch where capsule types ``i``
            and ``j`` are both present, by the input capsule lengths
            (:func:`count_structure`): observed in the input, not in the
            learned embeddings. The subcapsules' parts are learned, with no
            data to observe: their ``C_obs`` is their co-activation in both.
            On real data the two tie (docs/evidence.md): the default needs
            no count over the input patches.
        temperature: of the activation; finite, > 0. On real data 0.5
            ties with the default 0.1, and so did 0.03 in a screen
            (docs/evidence.md).
        pose_from: the parts the pose map reads. ``'mean'`` (default):
            every part the components' mean ``p^T X_p`` (the parts of
            uniform routing), so that the plan sets the activations only;
            ``'plan'``: the barycentric parts under the transport plan. The
            paper derives activations and poses from the alignment without
            saying how the pose is formed; on real data the plan's parts
            cost accuracy that the mean's do not (docs/evidence.md), so the
            plan's role is the activation. ``'mean_plus_plan'``: the mean's
            pose plus ``plan_pose_weight`` (zero at construction, so the
            fresh layer is the default's) applied to the parts' offsets
            ``V_q T^T X_p - p^T X_p`` from the mean: whatever the plan's
            parts hold beyond the mean is open to the task, which starts
            from the mean's layer (under uniform routing the offsets are
            0). ``'mean_plus_components'``: the same with the components'
            own offsets ``X_p - p^T X_p`` (all ``V_p d`` numbers, through
            ``component_pose_weight``, zero at construction) instead of the
            plan's parts: what the mean leaves out, reached without a
            plan; the control of ``'mean_plus_plan'``. Neither is ahead of
            ``'mean'`` on real data (docs/evidence.md): options, not defaults.
            ``'mean_plus_components_plus_plan'``: the mean's pose plus both
            offsets' poses, each through its own map: with
            ``components='positions'``, the convolution's reading of the
            patch plus what the plan gathers from its positions into each
            part (under uniform routing, the pose of
            ``'mean_plus_components'``). On real data the networks then
            rely on the plan more, but score as with
            ``'mean_plus_components'`` (docs/evidence.md): an option.
        reg_scope: what E trains. ``'network'``: E's gradient flows
            through the components into the layer's input, hence into every
            layer before it. ``'layer'``: E sees the components of the
            detached input, so it trains only the layer's own embedding
            convolution and subcapsules (the embeddings of Eq. 27); the
            layers before it learn from the task alone. ``'network'`` is the
            default: at the short schedules the configs ship with, confining
            E scored lower in four seeds of five (within the spread); over
            long schedules E's gradient bends the encoder until the layer's
            distances barely vary over the image, and ``'layer'`` kept more
            of a task decided by the arrangement of parts, beyond the
            seed spread; on the real sets at that length every model
            ties, stock included, so they cannot move the default yet
            (docs/evidence.md).
        align_weight: weight of the alignment term of Eq. 27, by which the
            paper updates the embeddings at the plan: the loss gains
            ``align_weight * beta * A``, ``A`` the :func:`alignment` of the
            HGW distances (the whole distance at the plan, its GW term
            included, as the routing op differentiates it). ``beta`` is the
            current, ramped value, as ``beta_U`` in Eq. 27. Without it the
            subcapsules learn from E (their own structure) and from the
            task through the activations alone, nothing pulling them toward
            the components they are matched with. 0 (default): on the
            built-in lesion set it tied at weight 1, and at weight 10 with
            hard shares, where it does make each location's types
            specialise (docs/evidence.md); finite, >= 0.
        align_temperature: temperature of the types' shares in the
            alignment term; None (default): the activation's
            ``temperature``. Where the distances of a location spread over
            the types by less than it, the shares are near uniform and the
            term pulls every subcapsule alike; a smaller one gives the
            best-aligned type the whole share (Algorithm 2's argmax
            alignment). Finite, > 0.
        backend: kernels of the routing op (envelope gradients):
            ``'auto'`` (C++ on the CPU, Triton on CUDA, else the torch
            reference with a warning), ``'cpp'``, ``'triton'`` or
            ``'torch'``; see :func:`mmhgw.ops.hgw_routing`. With
            ``solver_cfg['grad'] == 'unroll'`` the layer differentiates
            through the iterations of the torch reference instead.
        subcapsule_std: standard deviation of the normal distribution the
            subcapsules' parts are drawn from at construction; finite, > 0.
            With 1 (default) the fresh parts are several times longer than
            the fresh components (the default initialisation of the
            embedding convolution), so that every cross cost starts near the
            same value and the distances barely follow the input until the
            components have grown; about 0.3 starts the parts at the
            components' size. On real data the two tie, and so does
            training the subcapsules at 100x the learning rate (with SGD
            at the base rate they hardly move in a short schedule;
            docs/evidence.md): the default keeps the common draw.
        pose_gain: factor on the pose map's draw at construction, normal
            with standard deviation ``gain / sqrt(num_parts * part_dim)``;
            finite, > 0. The capsules are rescaled to their activations, so
            the output does not depend on the pose's length, but the
            gradient through it does (inversely): the gain sets how fast,
            under SGD, the pose map and every layer feeding the pose learn.
            The plan's barycentric parts lie several times farther from 0
            than the components' mean (docs/evidence.md), so at the same
            gain ``pose_from='plan'`` starts with a longer pose, hence a
            smaller gradient, than the default; on real data a quarter gain
            did not change its score, so the default keeps the draw.
        conv_cfg: config of the component convolution (default Conv2d).
        init_cfg: mmengine initialisation config.
        components: what a component is. ``'types'`` (default): one per
            input capsule type, embedded by its own k x k kernel, so each
            component has a fixed identity (a trained plan can settle to
            one grouping of the types per output type for every input,
            docs/evidence.md). ``'positions'``: one per position of the
            k x k patch, the input vector there through a map shared by
            all positions: a component is what is at a position, which the
            plan must match anew at every location. The mean of the
            positions is a box filter, so this pairs with
            ``pose_from='mean_plus_components'`` (the pose then reads every
            position, as a convolution does). At unit length
            (``component_norm``) the networks use what the input changes
            in the plan, but on the built-in lesion set they lose to
            ``'types'`` far beyond the seed spread (docs/evidence.md): an
            option. Needs the default
            ``conv_cfg`` and an observed structure other than
            ``'counts'`` (which counts input types).
        component_norm: divide every component by its root mean square
            (over its ``part_dim`` numbers) before it is matched and
            posed, so that its length cannot outgrow the scale of the
            bounded cross cost ``1 - exp(-||x - y||^2 / d)``. Left free,
            the shared map of ``components='positions'`` grows until
            every cross cost is at its bound and the plan is flat
            (docs/evidence.md). False (default): the components as
            embedded.
        **legacy: the previous release's arguments, deprecated (see
            :func:`~.hgw_caps_args.resolve_legacy`).
    """

    def __init__(self, in_channels: int, out_channels: int,
                 kernel_size: int = 3, stride: int = 1, padding: int = 0,
                 dilation: int = 1, groups: int = 1, bias: bool = False,
                 padding_mode: str = 'zeros', in_types: int = 32,
                 out_types: int = 32, num_parts: int = 8, part_dim: int = 8,
                 solver_cfg: Optional[dict] = None, beta: float = 0.5,
                 reg_weight: float = 10.0, routing: str = 'hgw',
                 use_observed: bool = True, observed: str = 'coactivation',
                 temperature: float = 0.1, pose_from: str = 'mean',
                 reg_scope: str = 'network', align_weight: float = 0.0,
                 align_temperature: Optional[float] = None,
                 subcapsule_std: float = 1.0, pose_gain: float = 1.0,
                 backend: str = 'auto', conv_cfg: Optional[dict] = None,
                 init_cfg: Optional[dict] = None, components: str = 'types',
                 component_norm: bool = False, **legacy):
        super().__init__(init_cfg=init_cfg)
        solver_cfg, reg_weight, use_observed = resolve_legacy(
            solver_cfg, reg_weight, use_observed, legacy)
        check_layer_args(in_channels, out_channels, groups, padding_mode,
                         in_types, out_types, num_parts, part_dim, beta,
                         reg_weight, routing, ROUTINGS, use_observed, observed,
                         temperature, reg_scope, backend, BACKENDS, pose_from,
                         align_weight, align_temperature, subcapsule_std,
                         pose_gain, components, conv_cfg, component_norm)
        # Fail at build time, not at the first forward.
        self.solver_cfg = build_solver_cfg(solver_cfg)
        self.use_observed = use_observed
        self.observed = observed
        self.in_channels, self.out_channels = in_channels, out_channels
        self.in_types, self.out_types = in_types, out_types
        self.components = components
        self.component_norm = component_norm
        self.out_dim = out_channels // out_types
        self.num_parts, self.part_dim = num_parts, part_dim
        self.routing = routing
        self.backend = backend
        self.reg_weight = float(reg_weight)
        self.reg_scope = reg_scope
        self.align_weight = float(align_weight)
        self.align_temperature = float(temperature if align_temperature is
                                       None else align_temperature)
        self.temperature = float(temperature)
        self.pose_from = pose_from
        #: The offsets the pose adds to the mean's, each through a map of
        #: its own: ``'plan'`` (the plan's parts), ``'components'`` (the
        #: components'); empty unless ``pose_from`` is a ``mean_plus_`` one.
        self.pose_offsets = frozenset(pose_from.split('_plus_')[1:])
        self.beta_final = float(beta)
        self.register_buffer('beta', torch.tensor(float(beta)))
        #: Factor of the optimiser wrapper on the loss, applied to the
        #: injected gradient of E and the alignment term (set by
        #: HGWLossScaleHook; None: 1).
        self.loss_scale = None

        if components == 'positions':
            self.embed = PositionEmbedding(in_channels, part_dim, kernel_size,
                                           stride, padding, dilation,
                                           padding_mode)
        else:
            # One embedding per input type from its own k x k patch. The
            # padding mode is passed only where it is not the default, so
            # that a conv_cfg type without the argument still builds.
            pad_mode = {} if padding_mode == 'zeros' else dict(
                padding_mode=padding_mode)
            self.embed = build_conv_layer(conv_cfg, in_channels,
                                          in_types * part_dim, kernel_size,
                                          stride=stride, padding=padding,
                                          dilation=dilation, groups=in_types,
                                          bias=False, **pad_mode)
        #: V_p, the components at every location.
        self.num_components = (self.embed.num_positions
                               if components == 'positions' else in_types)
        self.subcapsules = nn.Parameter(
            torch.randn(out_types, num_parts, part_dim) * subcapsule_std)
        self.pose_weight = nn.Parameter(
            torch.randn(out_types, num_parts * part_dim, self.out_dim) *
            (pose_gain / math.sqrt(num_parts * part_dim)))
        # Zeros draw nothing from the generator: the other parameters are
        # those of the default layer built under the same seed.
        if 'plan' in self.pose_offsets:
            self.plan_pose_weight = nn.Parameter(
                torch.zeros_like(self.pose_weight))
        if 'components' in self.pose_offsets:
            self.component_pose_weight = nn.Parameter(
                torch.zeros(out_types, self.num_components * part_dim,
                            self.out_dim))
        self.bias = nn.Parameter(torch.zeros(out_channels)) if bias else None
        #: Detached (regulariser, mean distance, alignment term) of the last
        #: training pass; a term the layer does not train with is None.
        self.last_stats = None

    def extra_repr(self) -> str:
        return (
            f'{self.in_channels}, {self.out_channels}, '
            f'types={self.in_types}->{self.out_types}, '
            f'components={self.components}, '
            f'component_norm={self.component_norm}, '
            f'parts={self.num_parts}x{self.part_dim}, '
            f'routing={self.routing}, observed={self.observed}, '
            f'use_observed={self.use_observed}, pose_from={self.pose_from}, '
            f'regularizer={self.solver_cfg["regularizer"]}, '
            f'reg_weight={self.reg_weight}, reg_scope={self.reg_scope}, '
            f'align_weight={self.align_weight}')

    def _components(self, x: Tensor) -> Tuple[Tensor, Tuple[int, int]]:
        """Components X_p [B, L, V_p, d], contiguous, and the output grid
        (H', W'). Contiguous once here, so that the routing op and the
        structures kernels, which both keep the components for backward,
        keep this one tensor rather than a copy each."""
        comps = self.embed(x)
        B, _, H, W = comps.shape
        if self.components == 'positions':  # part-major channels
            X_p = comps.view(B, self.part_dim, self.num_components,
                             H * W).permute(0, 3, 2, 1)
        else:
            X_p = comps.view(B, self.in_types, self.part_dim,
                             H * W).permute(0, 3, 1, 2)
        if self.component_norm:
            X_p = X_p * torch.rsqrt(
                X_p.pow(2).mean(-1, keepdim=True) + COMPONENT_NORM_EPS)
        return X_p.contiguous(), (H, W)

    def _structures(self, X_p: Tensor,
                    obs_p: Optional[Tensor] = None) -> Structures:
        """:func:`layer_structures` of components X_p [B, L, V_p, d]."""
        return layer_structures(X_p, self.subcapsules, self.beta.to(X_p.dtype),
                                obs_p, self.use_observed, self.observed)

    def _observed_p(self, x: Tensor) -> Optional[Tensor]:
        """:func:`observed_input` of the layer's input x."""
        return observed_input(x, self.in_types, self.embed, self.use_observed,
                              self.observed)

    def _routing_terms(
            self, X_p: Tensor, obs_p: Optional[Tensor], want_reg: bool,
            recompute: bool = False) -> Tuple[GWFactors, Optional[Tensor]]:
        """The factors and the regulariser E (None unless ``want_reg``) of
        the components X_p [B, L, V_p, d]; with ``recompute``, formed again
        in backward rather than kept."""
        if recompute:
            # The composition's [B, L, V_p, V_p] intermediates (about ten
            # per layer) are cheap to recompute in backward: keep only X_p,
            # as the C++ kernels do.
            return checkpoint(self._routing_terms, X_p, obs_p, want_reg,
                              use_reentrant=False)
        beta = self.beta.to(X_p.dtype)
        if not want_reg:
            return layer_factors(X_p, self.subcapsules, beta, obs_p,
                                 self.use_observed, self.observed,
                                 self.backend), None
        return layer_terms(X_p, self.subcapsules, beta, obs_p,
                           self.use_observed, self.observed, self.backend,
                           self.reg_weight)

    def _h1_recomputed(self, h1: Tensor, X_p: Tensor, obs_p: Optional[Tensor],
                       kernels: bool):
        """A context under which the routing op keeps no copy of the
        structure factor ``h1`` [B, L, V_p, V_p] (V_p / d times the size of
        the components, the largest tensor the layer would keep): backward
        forms it again from the components, which it keeps anyway, by the
        path the forward took (the structures kernels if ``kernels``, else
        the composition, even where backward's grad mode would pick the
        kernels; a few percent of the layer's forward, without the
        regulariser's term, which h1 does not depend on), at the beta of
        this forward and, as the forward, without autocast."""
        beta = self.beta.detach().clone().to(X_p.dtype)
        X_p = X_p.detach()
        backend = self.backend if kernels else 'torch'

        def recompute():
            with autocast_off(X_p.device.type):
                return layer_factors(X_p, self.subcapsules, beta, obs_p,
                                     self.use_observed, self.observed,
                                     backend).h1

        return recomputed_in_backward(h1, recompute)

    def _cross_cost(self, X_p: Tensor) -> Tensor:
        """``K(X_p, X_q[n])`` [B, L, N, V_p, V_q] (for :meth:`route`; the
        routing op computes it per location)."""
        B, L, V_p, d = X_p.shape
        K = cross_cost(X_p.reshape(B * L, V_p, d), self.subcapsules)
        return K.view(B, L, *K.shape[1:])

    def routing_options(self) -> dict:
        """The keyword arguments of :func:`mmhgw.ops.hgw_routing` that
        route as this layer does (the pose map aside)."""
        cfg = self.solver_cfg
        return dict(eps=cfg['eps'], outer_iters=cfg['outer_iters'],
                    inner_iters=cfg['inner_iters'],
                    regularizer=cfg['regularizer'], routing=self.routing,
                    backend=self.backend)

    def routing_inputs(self, x: Tensor) -> RoutingInputs:
        """The inputs of the routing op for the layer's input ``x``
        [B, in_channels, H, W]: ``hgw_routing(*layer.routing_inputs(x),
        **layer.routing_options())`` gives the layer's distances and parts
        (for benchmarks and inspection)."""
        X_p, _ = self._components(x)
        factors, _ = self._routing_terms(X_p, self._observed_p(x), False)
        return RoutingInputs(X_p, self.subcapsules, factors,
                             self.beta.to(X_p.dtype))

    def _solve(self, X_p: Tensor, s: Structures,
               routing: Optional[str] = None) -> Tuple[Tensor, Tensor, Tensor]:
        """``(distance [B, L, N], parts [B, L, N, V_q, d], plan
        [B, L, N, V_p, V_q])`` by the torch reference on all locations at
        once, with ``solver_cfg['grad']``: for ``'unroll'`` (autograd
        through the iterations) and for inspection (:meth:`route`)."""
        B, L, V_p, d = X_p.shape
        f = s.factors()
        flat = GWFactors(f.row.reshape(-1, V_p), f.col,
                         f.h1.reshape(-1, V_p, V_p), f.h2)
        options = self.routing_options()
        options.pop('backend')
        if routing is not None:
            options['routing'] = routing
        out = hgw_routing_reference(X_p.reshape(-1, V_p, d), self.subcapsules,
                                    flat, s.beta, grad=self.solver_cfg['grad'],
                                    return_plan=True, **options)
        return tuple(t.reshape(B, L, *t.shape[1:]) for t in out)

    def route(self, x: Tensor, routing: Optional[str] = None) -> dict:
        """The routing of one forward pass, for inspection and plotting.

        Returns a dict with ``components`` X_p [B, L, V_p, d],
        ``distance`` [B, L, out_types] (HGW distance of every location to
        every output type's subcapsule), ``plan`` [B, L, out_types, V_p,
        V_q], ``cross_cost`` K [B, L, out_types, V_p, V_q], the structure
        terms ``K_pp``, ``obs_p``, ``K_qq``, ``obs_q`` used by the
        regulariser, its value ``regulariser`` (E, whether training or not)
        and the output grid ``size`` (H', W'). Plans are materialised:
        meant for a few images. ``routing`` (``'hgw'`` or ``'uniform'``)
        routes the same layer otherwise than it is set to, e.g. to compare
        its HGW distances with those of the uniform plan on one input.
        """
        if routing is not None:
            check_choice('routing', routing, ROUTINGS)
        X_p, size = self._components(x)
        s = self._structures(X_p, self._observed_p(x))
        dist, _, plan = self._solve(X_p, s, routing)
        return dict(components=X_p, distance=dist, plan=plan,
                    cross_cost=self._cross_cost(X_p), K_pp=s.K_pp,
                    obs_p=s.obs_p, K_qq=s.K_qq, obs_q=s.obs_q,
                    regulariser=regulariser(s, self.reg_weight), size=size)

    def _capsules(self, pose: Tensor, dist: Tensor) -> Tensor:
        """Output capsules [B, L, N, out_dim]: the poses rescaled to their
        activations."""
        act = activation(dist, self.temperature)
        norm = torch.sqrt(pose.pow(2).sum(-1, keepdim=True) + SAFE_NORM_EPS)
        # The per-capsule factor first: autograd then keeps pose and one
        # [B, L, N, 1] tensor, not a second pose-sized product.
        return pose * (act.unsqueeze(-1) / norm)

    def _output(self, caps: Tensor, size: Tuple[int, int]) -> Tensor:
        """Capsules [B, L, N, out_dim] to the feature map [B, C, H', W'].

        The capsules are location-major, so the map is a channels-last view
        of them, not a copy; the convolutions after the layer then run
        channels-last, which CPU (oneDNN) and GPU (cuDNN) kernels favour (a
        channel-major copy made the rest of Mask R-CNN's backbone slower on
        the CPU)."""
        B = caps.shape[0]
        out = caps.reshape(B, *size, self.out_channels).permute(0, 3, 1, 2)
        if self.bias is not None:
            out = out + self.bias.view(1, -1, 1, 1)
        return out

    def _injects_terms(self) -> bool:
        """Whether this pass trains with the injected terms (E, the
        alignment term): training, with autograd on."""
        return self.training and torch.is_grad_enabled()

    def _wants_reg(self) -> bool:
        return self._injects_terms() and self.reg_weight > 0

    def _alignment_term(self, dist: Tensor) -> Optional[Tensor]:
        """``align_weight * beta * A`` of the distances [B, L, N] (None
        unless training with ``align_weight > 0``)."""
        if not (self._injects_terms() and self.align_weight > 0):
            return None
        return (self.align_weight * self.beta.to(dist.dtype) *
                alignment(dist, self.align_temperature))

    def _loss_scale(self) -> float:
        """The factor for the injected gradient of E and the alignment
        term (see ``loss_scale``)."""
        if self.loss_scale is not None:
            return self.loss_scale
        global _WARNED_UNSCALED
        if not _WARNED_UNSCALED and any(
                torch.is_autocast_enabled(device)
                for device in ('cpu', 'cuda')):
            # Mixed precision without the hook: the task loss is scaled
            # (2^16 by default) and E would all but vanish beside it.
            print_log(
                'HGWCaps: training under autocast without '
                'HGWLossScaleHook in custom_hooks; the regulariser E '
                'does not get the loss scale of the task loss',
                logger='current', level='WARNING')
            _WARNED_UNSCALED = True
        return 1.0

    def forward_terms(self,
                      x: Tensor) -> Tuple[Tensor, Optional[Tensor], Tensor]:
        """The output, the regulariser E (None unless training with
        ``reg_weight > 0``) and the HGW distances [B, H'*W', out_types],
        with E not yet attached to the output."""
        X_p, size = self._components(x)
        obs_p = self._observed_p(x)
        want_reg = self._wants_reg()
        # E of the components of the detached input reaches the layer's
        # own embeddings only: the same values by another gradient path.
        X_reg = (self._components(x.detach())[0]
                 if want_reg and self.reg_scope == 'layer' else None)
        if self.solver_cfg['grad'] == 'unroll':
            s = self._structures(X_p, obs_p)
            dist, parts, _ = self._solve(X_p, s)
            plan_pose = pose_map(parts, self._plan_pose_map())
            reg = None
            if want_reg:
                reg = (regulariser(s, self.reg_weight) if X_reg is None else
                       self._routing_terms(X_reg, obs_p, True)[1])
        else:
            grad = torch.is_grad_enabled()
            kernels = grad and runs_component_kernels(X_p, self.beta, obs_p,
                                                      self.backend)
            recompute = grad and not kernels
            factors, reg = self._routing_terms(X_p, obs_p, want_reg
                                               and X_reg is None, recompute)
            if X_reg is not None:
                reg = self._routing_terms(X_reg, obs_p, True, recompute)[1]
            keep = (self._h1_recomputed(factors.h1, X_p, obs_p, kernels)
                    if grad else contextlib.nullcontext())
            # Envelope gradients from the fused op: neither plans nor parts
            # are stored. The mean pose needs the distances alone.
            with keep:
                dist, plan_pose = hgw_routing(
                    X_p, self.subcapsules, factors, self.beta.to(X_p.dtype),
                    pose_weight=self._plan_pose_map(),
                    distance_only=not self.pose_reads_plan,
                    **self.routing_options())
        pose = self._pose(X_p, plan_pose)
        return self._output(self._capsules(pose, dist), size), reg, dist

    @property
    def pose_reads_plan(self) -> bool:
        """Whether the pose reads the plan's barycentric parts (otherwise
        the distances are all the layer needs of the solve)."""
        return self.pose_from == 'plan' or 'plan' in self.pose_offsets

    def _plan_pose_map(self) -> Tensor:
        """The pose map the plan's barycentric parts go through."""
        if 'plan' in self.pose_offsets:
            return self.plan_pose_weight
        return self.pose_weight

    def _pose(self, X_p: Tensor, plan_pose: Tensor) -> Tensor:
        """Poses [B, L, N, out_dim] by ``pose_from``, from the components
        X_p [B, L, V_p, d] and ``plan_pose``, the plan's parts through
        :meth:`_plan_pose_map` (unused unless the pose reads the plan)."""
        if self.pose_from == 'plan':
            return plan_pose
        if 'plan' in self.pose_offsets:
            # W m + W_r (parts - m) = W_r parts + (W - W_r) m: the pose
            # maps are linear, so the mean's pose is formed once.
            pose = plan_pose + mean_pose(
                X_p, self.pose_weight - self.plan_pose_weight)
        else:
            pose = mean_pose(X_p, self.pose_weight)
        if 'components' in self.pose_offsets:
            pose = pose + component_offset_pose(X_p,
                                                self.component_pose_weight)
        return pose

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        # Every way a checkpoint reaches the layer (load_from, resume,
        # init_cfg Pretrained, load_state_dict) passes here.
        check_checkpoint_beta(state_dict, prefix + 'beta')
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def _apply(self, fn, recurse=True):
        # The solver's log-domain iterations lose the transport plan in 16
        # bits (wrong plans, NaN at small eps), so the layer's own tensors
        # stay float32 (or wider) whatever `.half()`, `.bfloat16()` or
        # `.to(dtype)` asks; `forward` casts its input up and its output
        # back, as mmcv's fp16 utilities keep norm layers in float32.
        super()._apply(fn, recurse)
        return restore_float32(self, recurse)

    def forward(self, x: Tensor) -> Tensor:
        """``x`` [B, in_channels, H, W], or unbatched [in_channels, H, W]
        as ``nn.Conv2d`` takes it; the output has the input's dtype, the
        computation runs in the layer's (float32 or wider, autocast off)."""
        if x.dim() == 3:
            return self.forward(x.unsqueeze(0)).squeeze(0)
        if x.dim() != 4 or x.shape[1] != self.in_channels:
            raise ValueError(
                f'{type(self).__name__} expects input of shape [B, '
                f'{self.in_channels}, H, W] or [{self.in_channels}, H, W], '
                f'got {tuple(x.shape)}')
        in_dtype = x.dtype
        if narrower_than_float32(in_dtype):
            x = x.to(self.subcapsules.dtype)
        with autocast_off(x.device.type):
            out, reg, dist = self.forward_terms(x)
        if self.training:
            align = self._alignment_term(dist)
            aux = [t for t in (reg, align) if t is not None]
            if aux:
                out = attach_aux_loss(out, sum(aux), self._loss_scale())
            self.last_stats = (None if reg is None else reg.detach(),
                               dist.detach().mean(),
                               None if align is None else align.detach())
        return out.to(in_dtype)
