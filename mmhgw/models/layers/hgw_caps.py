"""The HGW capsule layer: a drop-in for a k x k convolution (paper Sec. 3-4,
Fig. 2, Eq. 18, Eq. 21, Eq. reg, Algorithm 1)."""
import itertools
import math
from contextlib import nullcontext
from typing import Optional, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F
from mmcv.cnn import build_conv_layer
from mmengine.logging import print_log
from mmengine.model import BaseModule
from torch import Tensor
from torch.utils.checkpoint import checkpoint

from mmhgw.ops import BACKENDS, cross_cost, hgw_routing
from mmhgw.ot import (check_solver_options, embedding_distance, gw_factors,
                      gw_terms, hgw_distance, hgw_value, mix_structure,
                      safe_log)
from mmhgw.registry import MODELS
from .aux_loss import attach_aux_loss

ROUTINGS = ('hgw', 'uniform')
ABLATIONS = (None, 'A', 'B', 'C')
OBSERVED = ('coactivation', 'counts')
REG_SCOPES = ('network', 'layer')

#: Added under the square root of the pose norm: no NaN gradient at u = 0.
SAFE_NORM_EPS = 1e-6

#: Whether the warning of ``HGWCaps._loss_scale`` was given.
_WARNED_UNSCALED = False


def presence(capsules: Tensor, dim: int = -1) -> Tensor:
    """How present each capsule is: ``a = s / (1 + s)`` in ``[0, 1)``, with
    ``s = ||x||^2 / d`` the squared length per dimension of the capsule
    vectors along ``dim`` (which is reduced)."""
    # Clamped so that capsules whose squares overflow are fully present
    # (inf / inf would be NaN); finite s is unchanged.
    s = capsules.pow(2).mean(dim).clamp_max(torch.finfo(capsules.dtype).max)
    return s / (1 + s)


def zipf_structure(parts: Tensor) -> Tensor:
    """Observed structure ``C_obs`` of a set of capsule parts (paper Eq. 18).

    ``c_ij = 1 / (w_ij + 1)`` with interaction count ``w_ij = a_i a_j``, the
    co-activation of parts ``i`` and ``j``, ``a`` their :func:`presence`.
    Parts that are both fully present interact once (c = 1/2); an absent
    part has no interaction (c = 1). So ``C_obs`` lies in ``(1/2, 1]``:
    bounded and positive, as the KL loss needs, and a deterministic function
    of the input (no sampling), hence deterministic in eval mode.

    Args:
        parts: [..., V, d].

    Returns:
        [..., V, V].
    """
    a = presence(parts)
    return 1 / (1 + a.unsqueeze(-1) * a.unsqueeze(-2))


def count_structure(x: Tensor, types: int, kernel_size, stride=1, padding=0,
                    dilation=1) -> Tensor:
    """Observed structure ``C_obs`` of every k x k patch of an input
    capsule map, from interaction counts (paper Eq. 18).

    ``w_ij`` counts the positions of the patch where input capsule types
    ``i`` and ``j`` are both present, softly: ``w_ij = sum_r a_i(r) a_j(r)``
    over the patch positions ``r``, with ``a`` the :func:`presence` of the
    input capsules (their lengths); ``c_ij = 1 / (w_ij + 1)``, 1 where no
    position holds both (padding holds nothing). ``w`` lies in
    ``[0, k * k]``, so ``C_obs`` in ``[1 / (k * k + 1), 1]``. The counts are
    observations of the data: computed without gradient.

    Args:
        x: [B, types * dim, H, W] type-major input capsules.
        types: input capsule types (V).
        kernel_size, stride, padding, dilation: the patch grid, as
            ``nn.Conv2d`` (so the output locations are the layer's).

    Returns:
        [B, H' * W', V, V].
    """
    with torch.no_grad():
        B, C, H, W = x.shape
        a = presence(x.view(B, types, C // types, H, W), dim=2)
        patches = F.unfold(a, kernel_size, dilation=dilation,
                           padding=padding, stride=stride)
        patches = patches.view(B, types, -1, patches.shape[-1])
        counts = torch.einsum('birl,bjrl->blij', patches, patches)
        return 1 / (1 + counts)


def kl_off_diagonal(A: Tensor, B: Tensor) -> Tensor:
    """``L(A, B)`` of paper Eq. reg, averaged over problems and over the
    off-diagonal entries of the [..., V, V] matrices.

    The diagonal is left out: an embedding's distance to itself sits at the
    distance floor while ``C_obs`` has ``1 / (1 + a_i^2) >= 1/2`` there, a
    constant offset of about 0.5 per entry with zero gradient (a part does
    not interact with itself) that would only swamp the logged value.
    With ``V = 1`` there is no off-diagonal entry and the loss is 0.
    """
    V = A.shape[-1]
    if V < 2:
        # A single part has no off-diagonal entry: nothing to regularise
        # (averaging over V (V - 1) = 0 entries would give NaN).
        return A.new_zeros(())
    off = ~torch.eye(V, dtype=torch.bool, device=A.device)
    per_entry = A * (safe_log(A) - safe_log(B)) - A + B
    return (per_entry * off).sum((-1, -2)).mean() / (V * (V - 1))


def _narrower_than_float32(dtype: torch.dtype) -> bool:
    return dtype.is_floating_point and torch.finfo(dtype).bits < 32


def _autocast_off(device_type: str):
    """Under AMP, autocast would run the solver's products in 16 bits."""
    try:
        enabled = torch.is_autocast_enabled(device_type)
    except RuntimeError:  # a device type autocast does not know ('meta')
        return nullcontext()
    return torch.autocast(device_type, enabled=False) if enabled \
        else nullcontext()


@MODELS.register_module()
class HGWCaps(BaseModule):
    """Hybrid Gromov-Wasserstein capsules in place of a k x k convolution.

    Channels are type-major capsules: ``in_channels = in_types * in_dim``,
    ``out_channels = out_types * out_dim``. At every output location (the
    same grid as ``nn.Conv2d`` with these ``kernel_size``, ``stride``,
    ``padding`` and ``dilation``):

    1. Components ``X_p`` [V_p = in_types, part_dim]: one embedding per input
       capsule type from its k x k patch, by one grouped convolution
       (``groups = in_types``), so no vote tensor is unfolded.
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
    5. Pose: the barycentric projection of the components onto the
       subcapsule's parts through the plan, ``V_q T^T X_p`` [V_q, part_dim],
       mapped to ``out_dim`` by a learned per-type linear map (inside the
       fused op, so that the parts, 8x a 256-channel output, are not kept
       for backward) and rescaled to length ``a_n`` (safe norm).
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
        in_types: input capsule types (= V_p, the components).
        out_types: output capsule types (one subcapsule each).
        num_parts: parts per subcapsule (V_q).
        part_dim: embedding size of components and parts. These four are
            positive ints; with ``in_types`` or ``num_parts`` 1 the
            structure of that side has no off-diagonal entry and its term
            of the regulariser is 0.
        eps: proximal step of the solver (paper: 1e-3). In the proximal
            point method eps is the step size, not a blur: every eps has the
            same fixed points (stationary points of Eq. 21), and 1e-2
            reaches them in far fewer iterations. Measured
            (``bench/bench_convergence.py``): at eps 1e-2 with 3 x 10
            iterations rounding moves 1-3% of the plan's mass and 95-96%
            of row argmaxes agree with the converged plan, which itself
            agrees with the converged plan at eps 1e-3 on ~97% of them; the
            paper's eps at 2 x 3 iterations moved 46-83% and agreed on
            52-73%.
        outer_iters, inner_iters: proximal steps and Sinkhorn iterations
            per step (defaults: the measured choice above).
        grad: ``'envelope'`` or ``'unroll'`` (see ``hgw_distance``).
        beta: final weight of the embeddings in the structures and of the
            Wasserstein term (Eq. 21, one weight as in the paper); the
            current value is the buffer ``beta``, ramped by
            ``HGWBetaWarmupHook``.
        reg_weight: lambda of Eq. reg (paper: 10); finite, >= 0.
        routing: ``'hgw'``, or ``'uniform'`` (plan fixed to ``p q^T``: no
            optimal transport, the baseline routing must beat).
        solver_regularizer: ``'proximal'`` (paper) or ``'entropic'``.
        observed: the observed structure ``C_obs`` of the input domain
            (Eq. 18). ``'coactivation'``: ``w_ij = a_i a_j`` from the
            presence of the components themselves
            (:func:`zipf_structure`); ``'counts'``: ``w_ij`` counts the
            positions of the k x k input patch where capsule types ``i``
            and ``j`` are both present, by the input capsule lengths
            (:func:`count_structure`): observed in the input, not in the
            learned embeddings. The subcapsules' parts are learned, with no
            data to observe: their ``C_obs`` is their co-activation in both.
        ablation: the paper's ablations (Sec. Q4), each changing one thing:
            ``'A'``: the solver's proximal KL term becomes the entropic
            regulariser H(T) (``solver_regularizer='entropic'``).
            ``'B'``: no regulariser E (``reg_weight=0``).
            ``'C'``: no observed structure anywhere. Both structures are
            the embeddings' alone, ``C = K(X, X)`` (the paper's mixing
            weight 1), and E's target is Eq. 18 with no interaction
            observed, ``c_ij = 1`` (E keeps its weight; B removes it). The
            Wasserstein weight stays ``beta`` (ramped to its final value as
            in the other variants), so only the use of observed data
            changes.
        temperature: of the activation; finite, > 0.
        reg_scope: what E trains. ``'network'``: E's gradient flows
            through the components into the layer's input, hence into every
            layer before it. ``'layer'``: E sees the components of the
            detached input, so it trains only the layer's own embedding
            convolution and subcapsules (the embeddings of Eq. 27); the
            layers before it learn from the task alone.
        backend: kernels of the routing op (envelope gradients):
            ``'auto'`` (C++ on the CPU, Triton on CUDA, else the torch
            reference with a warning), ``'cpp'``, ``'triton'`` or
            ``'torch'``; see :func:`mmhgw.ops.hgw_routing`. With
            ``grad='unroll'`` the layer differentiates through the torch
            solver's iterations instead.
        conv_cfg: config of the component convolution (default Conv2d).
        init_cfg: mmengine initialisation config.
    """

    def __init__(self,
                 in_channels: int,
                 out_channels: int,
                 kernel_size: int = 3,
                 stride: int = 1,
                 padding: int = 0,
                 dilation: int = 1,
                 groups: int = 1,
                 bias: bool = False,
                 in_types: int = 32,
                 out_types: int = 32,
                 num_parts: int = 8,
                 part_dim: int = 8,
                 eps: float = 1e-2,
                 outer_iters: int = 3,
                 inner_iters: int = 10,
                 grad: str = 'envelope',
                 beta: float = 0.5,
                 reg_weight: float = 10.0,
                 routing: str = 'hgw',
                 solver_regularizer: str = 'proximal',
                 ablation: Optional[str] = None,
                 observed: str = 'coactivation',
                 temperature: float = 0.1,
                 reg_scope: str = 'network',
                 backend: str = 'auto',
                 conv_cfg: Optional[dict] = None,
                 init_cfg: Optional[dict] = None):
        super().__init__(init_cfg=init_cfg)
        for name, value in (('in_types', in_types), ('out_types', out_types),
                            ('num_parts', num_parts),
                            ('part_dim', part_dim)):
            if isinstance(value, bool) or not isinstance(value, int) \
                    or value < 1:
                raise ValueError(f'{name} must be a positive int, '
                                 f'got {value!r}')
        if groups != 1:
            raise ValueError(f'groups must be 1 for HGWCaps (capsule types '
                             f'replace channel groups), got {groups}')
        for name, total, types in (('in_channels', in_channels, in_types),
                                   ('out_channels', out_channels, out_types)):
            if types < 1 or total % types:
                raise ValueError(
                    f'{name}={total} must be divisible by '
                    f'{name.split("_")[0]}_types={types}')
        if routing not in ROUTINGS:
            raise ValueError(f'routing must be one of {ROUTINGS}, '
                             f'got {routing!r}')
        if reg_scope not in REG_SCOPES:
            raise ValueError(f'reg_scope must be one of {REG_SCOPES}, '
                             f'got {reg_scope!r}')
        if ablation not in ABLATIONS:
            raise ValueError(f'ablation must be one of {ABLATIONS}, '
                             f'got {ablation!r}')
        if observed not in OBSERVED:
            raise ValueError(f'observed must be one of {OBSERVED}, '
                             f'got {observed!r}')
        if not 0 <= beta <= 1:
            raise ValueError(f'beta must be in [0, 1], got {beta}')
        if backend not in BACKENDS:
            raise ValueError(f'backend must be one of {BACKENDS}, '
                             f'got {backend!r}')
        # Written so that NaN fails too (every comparison with NaN is False).
        if not 0 < temperature < math.inf:
            raise ValueError(f'temperature must be a positive finite '
                             f'number, got {temperature}')
        if not 0 <= reg_weight < math.inf:
            raise ValueError(f'reg_weight must be a finite number >= 0, '
                             f'got {reg_weight}')
        if ablation == 'A':
            solver_regularizer = 'entropic'
        elif ablation == 'B':
            reg_weight = 0.0
        #: False under ablation C: no observed structure (see _structures).
        self.use_observed = ablation != 'C'
        self.observed = observed
        self.in_channels, self.out_channels = in_channels, out_channels
        self.in_types, self.out_types = in_types, out_types
        self.out_dim = out_channels // out_types
        self.num_parts, self.part_dim = num_parts, part_dim
        self.solver_cfg = dict(eps=eps, outer_iters=outer_iters,
                               inner_iters=inner_iters, grad=grad,
                               regularizer=solver_regularizer)
        # Fail at build time, not at the first forward.
        check_solver_options(eps=eps, outer_iters=outer_iters,
                             inner_iters=inner_iters, grad=grad,
                             regularizer=solver_regularizer)
        self.routing = routing
        self.backend = backend
        self.ablation = ablation
        self.reg_weight = float(reg_weight)
        self.reg_scope = reg_scope
        self.temperature = float(temperature)
        self.beta_final = float(beta)
        self.register_buffer('beta', torch.tensor(float(beta)))
        #: Factor of the optimiser wrapper on the loss, applied to E's
        #: gradient (set by HGWLossScaleHook; None: 1).
        self.loss_scale = None

        # One embedding per input type from its own k x k patch.
        self.embed = build_conv_layer(
            conv_cfg, in_channels, in_types * part_dim, kernel_size,
            stride=stride, padding=padding, dilation=dilation,
            groups=in_types, bias=False)
        self.subcapsules = nn.Parameter(
            torch.randn(out_types, num_parts, part_dim))
        self.pose_weight = nn.Parameter(
            torch.randn(out_types, num_parts * part_dim, self.out_dim) /
            math.sqrt(num_parts * part_dim))
        self.bias = nn.Parameter(torch.zeros(out_channels)) if bias else None
        #: Detached (regulariser, mean distance) of the last training pass.
        self.last_stats = None

    def extra_repr(self) -> str:
        return (f'{self.in_channels}, {self.out_channels}, '
                f'types={self.in_types}->{self.out_types}, '
                f'parts={self.num_parts}x{self.part_dim}, '
                f'routing={self.routing}, ablation={self.ablation}, '
                f'observed={self.observed}')

    def _components(self, x: Tensor) -> Tuple[Tensor, Tuple[int, int]]:
        """Components X_p [B, L, V_p, d] and the output grid (H', W')."""
        comps = self.embed(x)
        B, _, H, W = comps.shape
        X_p = comps.view(B, self.in_types, self.part_dim,
                         H * W).permute(0, 3, 1, 2)
        return X_p, (H, W)

    def _observed_p(self, x: Tensor) -> Optional[Tensor]:
        """``C_obs`` of the input patches [B, L, V_p, V_p] when it is
        observed in the input x (``observed='counts'``), else None."""
        if not (self.use_observed and self.observed == 'counts'):
            return None
        e = self.embed
        return count_structure(x, self.in_types, e.kernel_size, e.stride,
                               e.padding, e.dilation).to(x.dtype)

    def _observed_q(self) -> Tensor:
        """``C_obs`` of the subcapsules' parts [N, V_q, V_q] (Eq. 18)."""
        X_q = self.subcapsules
        if not self.use_observed:  # ablation C: no interaction observed
            return X_q.new_ones(()).expand(X_q.shape[0], X_q.shape[1],
                                           X_q.shape[1])
        return zipf_structure(X_q)

    def _structures(self, X_p: Tensor, obs_p: Optional[Tensor] = None
                    ) -> dict:
        """The structures of Eq. 21 for components X_p [B, L, V_p, d]:
        ``C_p`` [B, L, V_p, V_p], ``C_q`` [N, V_q, V_q], ``beta`` (the
        Wasserstein weight), and the regulariser's ``K_pp``, ``obs_p``,
        ``K_qq``, ``obs_q`` (its targets).

        ``obs_p``: the input's observed structure from :meth:`_observed_p`
        (for the same locations as X_p) when ``observed='counts'``.
        Ablation C uses no observed structure: ``C = K(X, X)`` and the
        targets are all ones (Eq. 18 with nothing observed).
        """
        X_q = self.subcapsules
        K_pp = embedding_distance(X_p, X_p)  # [B, L, Vp, Vp]
        K_qq = embedding_distance(X_q, X_q)  # [N, Vq, Vq]
        beta = self.beta.to(X_p.dtype)
        obs_q = self._observed_q()
        if not self.use_observed:
            obs_p = K_pp.new_ones(()).expand_as(K_pp)
            C_p, C_q = K_pp, K_qq
        else:
            if obs_p is None:
                if self.observed == 'counts':
                    raise ValueError("observed='counts' needs the input's "
                                     'observed structure (obs_p)')
                obs_p = zipf_structure(X_p)
            C_p = mix_structure(obs_p, K_pp, beta)
            C_q = mix_structure(obs_q, K_qq, beta)
        return dict(C_p=C_p, C_q=C_q, beta=beta, K_pp=K_pp, obs_p=obs_p,
                    K_qq=K_qq, obs_q=obs_q)

    def _cross_cost(self, X_p: Tensor) -> Tensor:
        """``K(X_p, X_q[n])`` [B, L, N, V_p, V_q] (for :meth:`route` and the
        unrolled path; the fused op computes it per location)."""
        B, L, V_p, d = X_p.shape
        K = cross_cost(X_p.reshape(B * L, V_p, d), self.subcapsules)
        return K.view(B, L, *K.shape[1:])

    def _routing_terms(self, X_p: Tensor, obs_p: Optional[Tensor],
                       want_reg: bool, X_reg: Optional[Tensor] = None):
        """The routing op's structure factors ``(row, col, h1, h2)`` (see
        :func:`mmhgw.ot.gw_factors`) and the regulariser E (None unless
        ``want_reg``), from the components X_p [B, L, V_p, d]."""
        s = self._structures(X_p, obs_p)
        p = X_p.new_full((self.in_types, ), 1.0 / self.in_types)
        q = X_p.new_full((self.num_parts, ), 1.0 / self.num_parts)
        row, col, h1, h2 = gw_factors(s['C_p'], s['C_q'], p, q)
        reg = self._regulariser(s, X_reg) if want_reg else None
        return row, col, h1, h2, reg

    def _regulariser(self, s: dict, X_reg: Optional[Tensor] = None
                     ) -> Tensor:
        """E of Eq. reg from the structure terms of :meth:`_structures`;
        with ``X_reg`` (the same components by another gradient path, see
        ``reg_scope``) its input-domain term is taken on those."""
        K_pp = s['K_pp'] if X_reg is None else \
            embedding_distance(X_reg, X_reg)
        return self.reg_weight * (
            kl_off_diagonal(K_pp, s['obs_p'].detach()) +
            kl_off_diagonal(s['K_qq'], s['obs_q'].detach()))

    def _route_fused(self, X_p: Tensor, row: Tensor, col: Tensor,
                     h1: Tensor, h2: Tensor) -> Tuple[Tensor, Tensor]:
        """Distances [B, L, N] and poses [B, L, N, out_dim] from the fused
        op (envelope gradients; neither plans nor parts are stored)."""
        cfg = self.solver_cfg
        return hgw_routing(
            X_p, self.subcapsules, h1, h2, row, col, self.beta.to(X_p.dtype),
            eps=cfg['eps'], outer_iters=cfg['outer_iters'],
            inner_iters=cfg['inner_iters'], regularizer=cfg['regularizer'],
            routing=self.routing, backend=self.backend,
            pose_weight=self.pose_weight)

    def _solve(self, X_p: Tensor, s: dict) -> Tuple[Tensor, Tensor, Tensor]:
        """``(distance [B, L, N], parts [B, L, N, V_q, d], plan)`` by the
        torch solver on full tensors: for ``grad='unroll'`` (autograd through
        the iterations) and for inspection (:meth:`route`)."""
        V_q = self.num_parts
        K = self._cross_cost(X_p)
        C_p = s['C_p'].unsqueeze(2)
        if self.routing == 'hgw':
            dist, plan = hgw_distance(C_p, s['C_q'], K, beta=s['beta'],
                                      check_values=False, **self.solver_cfg)
        else:
            V_p = self.in_types
            plan = K.new_full((1, ), 1.0 / (V_p * V_q)).expand(K.shape)
            p = K.new_full((V_p, ), 1.0 / V_p)
            q = K.new_full((V_q, ), 1.0 / V_q)
            dist = hgw_value(gw_terms(C_p, s['C_q'], p, q), K, plan,
                             s['beta'])
        # Columns of the plan sum to 1 / V_q, hence the factor V_q.
        parts = V_q * torch.einsum('blnpq,blpd->blnqd', plan, X_p)
        return dist, parts, plan

    def route(self, x: Tensor) -> dict:
        """The routing of one forward pass, for inspection and plotting.

        Returns a dict with ``components`` X_p [B, L, V_p, d],
        ``distance`` [B, L, out_types] (HGW distance of every location to
        every output type's subcapsule), ``plan`` [B, L, out_types, V_p,
        V_q], the structure terms ``K_pp``, ``obs_p``, ``K_qq``, ``obs_q``
        used by the regulariser, and the output grid ``size`` (H', W').
        Plans are materialised: meant for a few images.
        """
        X_p, size = self._components(x)
        s = self._structures(X_p, self._observed_p(x))
        dist, _, plan = self._solve(X_p, s)
        return dict(components=X_p, distance=dist, plan=plan,
                    K_pp=s['K_pp'], obs_p=s['obs_p'], K_qq=s['K_qq'],
                    obs_q=s['obs_q'], size=size)

    def _poses(self, parts: Tensor) -> Tensor:
        """The parts [B, L, N, V_q, d] mapped to poses [B, L, N, out_dim]
        (the fused op applies the same map itself)."""
        return torch.einsum('blnk,nko->blno', parts.flatten(-2),
                            self.pose_weight)

    def _capsules(self, pose: Tensor, dist: Tensor) -> Tensor:
        """Output capsules [B, L, N, out_dim]: the poses rescaled to their
        activations."""
        act = torch.exp(-(dist - dist.min(-1, keepdim=True)[0]) /
                        self.temperature)
        norm = torch.sqrt(pose.pow(2).sum(-1, keepdim=True) + SAFE_NORM_EPS)
        # The per-capsule factor first: autograd then keeps pose and one
        # [B, L, N, 1] tensor, not a second pose-sized product.
        return pose * (act.unsqueeze(-1) / norm)

    def _output(self, caps: Tensor, size: Tuple[int, int]) -> Tensor:
        """Capsules [B, L, N, out_dim] to the feature map [B, C, H', W'].

        The capsules are location-major, so the map is a channels-last view
        of them, not a copy; the convolutions after the layer then run
        channels-last, which CPU (oneDNN) and GPU (cuDNN) kernels favour (a
        channel-major copy made the rest of Mask R-CNN's backbone 20%
        slower on the CPU)."""
        B = caps.shape[0]
        out = caps.reshape(B, *size, self.out_channels).permute(0, 3, 1, 2)
        if self.bias is not None:
            out = out + self.bias.view(1, -1, 1, 1)
        return out

    def _wants_reg(self) -> bool:
        return (self.training and self.reg_weight > 0 and
                torch.is_grad_enabled())

    def _loss_scale(self) -> float:
        """The factor for E's injected gradient (see ``loss_scale``)."""
        if self.loss_scale is not None:
            return self.loss_scale
        global _WARNED_UNSCALED
        if not _WARNED_UNSCALED and any(
                torch.is_autocast_enabled(device)
                for device in ('cpu', 'cuda')):
            # Mixed precision without the hook: the task loss is scaled
            # (2^16 by default) and E would all but vanish beside it.
            print_log('HGWCaps: training under autocast without '
                      'HGWLossScaleHook in custom_hooks; the regulariser E '
                      'does not get the loss scale of the task loss',
                      logger='current', level='WARNING')
            _WARNED_UNSCALED = True
        return 1.0

    def forward_terms(self, x: Tensor
                      ) -> Tuple[Tensor, Optional[Tensor], Tensor]:
        """The output, the regulariser E (None unless training with
        ``reg_weight > 0``) and the HGW distances [B, H'*W', out_types],
        with E not yet attached to the output."""
        X_p, size = self._components(x)
        obs_p = self._observed_p(x)
        want_reg = self._wants_reg()
        X_reg = None
        if want_reg and self.reg_scope == 'layer':
            X_reg = self._components(x.detach())[0]
        if self.solver_cfg['grad'] == 'unroll':
            s = self._structures(X_p, obs_p)
            dist, parts, _ = self._solve(X_p, s)
            pose = self._poses(parts)
            reg = self._regulariser(s, X_reg) if want_reg else None
        else:
            terms = (X_p, obs_p, want_reg, X_reg)
            if torch.is_grad_enabled():
                # The structures' [B, L, V_p, V_p] intermediates (about ten
                # per layer, 1.8x the stock Mask R-CNN's training memory)
                # are cheap to recompute in backward: keep only X_p.
                row, col, h1, h2, reg = checkpoint(
                    self._routing_terms, *terms, use_reentrant=False)
            else:
                row, col, h1, h2, reg = self._routing_terms(*terms)
            dist, pose = self._route_fused(X_p, row, col, h1, h2)
        return self._output(self._capsules(pose, dist), size), reg, dist

    def _load_from_state_dict(self, state_dict, prefix, local_metadata,
                              strict, missing_keys, unexpected_keys,
                              error_msgs):
        # Every way a checkpoint reaches the layer (load_from, resume,
        # init_cfg Pretrained, load_state_dict) passes here. A beta outside
        # [0, 1] makes every output NaN; refuse it, naming the key.
        key = prefix + 'beta'
        beta = state_dict.get(key)
        if torch.is_tensor(beta) and not bool(
                ((beta >= 0) & (beta <= 1)).all()):
            raise ValueError(
                f'checkpoint key {key!r} holds beta = '
                f'{beta.flatten()[:4].tolist()}: the capsule layer\'s beta '
                f'must be a finite number in [0, 1]; the checkpoint is '
                f'corrupt or not of this layer')
        super()._load_from_state_dict(state_dict, prefix, local_metadata,
                                      strict, missing_keys, unexpected_keys,
                                      error_msgs)

    def _apply(self, fn, recurse=True):
        # The solver's log-domain iterations lose the transport plan in 16
        # bits (wrong plans, NaN at small eps), so the layer's own tensors
        # stay float32 (or wider) whatever `.half()`, `.bfloat16()` or
        # `.to(dtype)` asks; `forward` casts its input up and its output
        # back, as mmcv's fp16 utilities keep norm layers in float32.
        super()._apply(fn, recurse)
        for t in itertools.chain(self.parameters(recurse=recurse),
                                 self.buffers(recurse=recurse)):
            if _narrower_than_float32(t.dtype):
                t.data = t.data.float()
                if t.grad is not None:
                    t.grad = t.grad.float()
        return self

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
        if _narrower_than_float32(in_dtype):
            x = x.to(self.subcapsules.dtype)
        with _autocast_off(x.device.type):
            out, reg, dist = self.forward_terms(x)
        if self.training:
            if reg is not None:
                out = attach_aux_loss(out, reg, self._loss_scale())
            self.last_stats = (None if reg is None else reg.detach(),
                               dist.detach().mean())
        return out.to(in_dtype)
