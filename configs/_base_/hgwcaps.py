# What every HGWCaps config shares: the plugin import, the capsule layer's
# settings and the beta warm-up. Values marked "paper" are from the paper;
# the others are this project's defaults (see docs/benchmarks.md for cost).
custom_imports = dict(imports=['mmhgw'], allow_failed_imports=False)

hgw_cfg = dict(
    type='HGWCaps',
    in_types=32,  # 256 / 512 / 1024 channels -> capsules of dim 8 / 16 / 32
    out_types=32,
    num_parts=8,  # V_q, parts per subcapsule
    part_dim=8,
    eps=1e-3,  # paper
    outer_iters=2,
    inner_iters=3,
    grad='envelope',
    beta=0.5,  # final beta; 1.0 would drop the observed structure (abl. C)
    reg_weight=10.0,  # paper's lambda
    routing='hgw',
    # Backward recomputes all but the plan: 1.6x instead of 5.1x the stock
    # Mask R-CNN's training memory; 'all' for least memory, 'none' to keep
    # everything (docs/benchmarks.md).
    recompute='value')

# beta_u = u / U (paper, Algorithm 1), over the first 1000 iterations; the
# regulariser E gets the optimiser wrapper's loss scaling (AMP, gradient
# accumulation) as the task loss does.
custom_hooks = [
    dict(type='HGWBetaWarmupHook', warmup_iters=1000),
    dict(type='HGWLossScaleHook')
]
