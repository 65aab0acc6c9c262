# The capsule layer's settings and the hooks of an HGWCaps run, without the
# runtime keys (custom_imports, custom_hooks): for HGWCaps configs built on
# this project's stock baselines, which carry those keys already (two bases
# may not both set a key). On top of mmdet's / mmseg's own configs use
# hgwcaps.py, which adds them.
#
# The layer's defaults apply (HGWCaps' docstring: 32 input and output types,
# 8 parts of dim 8, beta 0.5, the paper's lambda 10, HGW routing by the
# fused kernels, and the solver of SOLVER_DEFAULTS, chosen as the README's
# "What the plan is, and is not" explains). Override any of them here, e.g.
# hgw_cfg = dict(type='HGWCaps', solver_cfg=dict(eps=1e-3, outer_iters=8,
# inner_iters=50)) for the paper's eps at converged iteration counts.
hgw_cfg = dict(type='HGWCaps')

hgw_hooks = [
    # beta_u = u / U (paper, Algorithm 1), over the first 1000 iterations.
    dict(type='HGWBetaWarmupHook', warmup_iters=1000),
    # The regulariser E gets the optimiser wrapper's loss scaling (AMP,
    # gradient accumulation) as the task loss does.
    dict(type='HGWLossScaleHook'),
    # Stop a diverged run before it writes a NaN checkpoint.
    dict(type='NonFiniteGuardHook'),
    # Random generator states in checkpoints: resume is exact.
    dict(type='RNGStateHook'),
]
