"""The options of the stock test scripts (``tools/test.py`` of mmdet 3.3,
mmseg 1.2 and mmpretrain 1.2) for this project's ``tools/test.py``, applied
to the config as the script of the config's ``default_scope`` applies them.

Beyond the stock scripts: ``--tta`` builds a flip test-time augmentation
from the test pipeline when the config has no ``tta_pipeline`` for every
scope (mmseg's script needs one), ``--amp`` and ``--no-pin-memory`` (from
mmpretrain's) and ``--interval`` apply to every scope.
"""
import copy
import os.path as osp
import warnings

from mmengine.config import ConfigDict

SCOPES = ('mmdet', 'mmseg', 'mmpretrain')

# The test-time model that merges the augmented predictions, per scope,
# when the config has no ``tta_model`` (mmdet's and mmpretrain's defaults).
DEFAULT_TTA_MODELS = {
    'mmdet': dict(
        type='DetTTAModel',
        tta_cfg=dict(nms=dict(type='nms', iou_threshold=0.5),
                     max_per_img=100)),
    'mmseg': dict(type='SegTTAModel'),
    'mmpretrain': dict(type='mmpretrain.AverageClsScoreTTA'),
}


def add_test_options(parser):
    """The stock test scripts' options: ``--out``, ``--out-item``,
    ``--show``, ``--show-dir``, ``--wait-time``, ``--interval``, ``--tta``,
    ``--amp``, ``--no-pin-memory``."""
    parser.add_argument(
        '--out', help='mmdet, mmpretrain: dump the predictions to this '
        '.pkl file; mmseg: save the predicted masks into this directory')
    parser.add_argument('--out-item', choices=['metrics', 'pred'],
                        help='mmpretrain: what --out holds (default: pred)')
    parser.add_argument('--show', action='store_true',
                        help='show the predictions in a window')
    parser.add_argument('--show-dir',
                        help='save images painted with the predictions here')
    parser.add_argument('--wait-time', type=float, default=2,
                        help='seconds each shown image stays (--show)')
    parser.add_argument(
        '--interval', type=int,
        help='paint every N-th image (default: the visualization hook\'s '
        'own; mmpretrain: 1)')
    parser.add_argument(
        '--tta', action='store_true',
        help='test-time augmentation (tta_model and '
        'tta_pipeline of the config; default: flips)')
    parser.add_argument('--amp', action='store_true',
                        help='test under autocast (test_cfg.fp16)')
    parser.add_argument('--no-pin-memory', action='store_true',
                        help='no pinned memory in the test dataloader')


def _keys(node):
    """Every dict key under ``node`` whose value is set."""
    if isinstance(node, dict):
        for key, value in node.items():
            if value is not None:
                yield key
                yield from _keys(value)
    elif isinstance(node, (list, tuple)):
        for value in node:
            yield from _keys(value)


def _innermost_dataset(cfg):
    dataset = cfg.test_dataloader.dataset
    while 'dataset' in dataset:
        dataset = dataset.dataset
    return dataset


def _flip_tta_pipeline(test_pipeline, scope):
    """The test pipeline with its packing step replaced by the original and
    the horizontally flipped image (the original first: merged predictions
    keep the first view's annotations); annotations are loaded after the
    flip, so that they stay unflipped (mmseg evaluates them)."""
    pipeline = copy.deepcopy(list(test_pipeline))
    pack = pipeline.pop()
    if pack.get('meta_keys') is not None:
        pack['meta_keys'] = tuple(pack['meta_keys']) + tuple(
            k
            for k in ('flip', 'flip_direction') if k not in pack['meta_keys'])
    annotations = [] if scope != 'mmseg' else [
        step for step in pipeline if 'Annotations' in step['type']
    ]
    pipeline = [step for step in pipeline if step not in annotations]
    flips = [
        dict(type='RandomFlip', prob=p, direction='horizontal')
        for p in (0., 1.)
    ]
    pipeline.append(
        dict(type='TestTimeAug',
             transforms=[flips, *[[a] for a in annotations], [pack]]))
    return pipeline


def _visualize(cfg, args, scope):
    hook = cfg.default_hooks.get('visualization')
    if hook is None:
        raise ValueError(
            '--show / --show-dir need a visualization hook in the config: '
            "default_hooks.visualization = dict(type='...VisualizationHook')")
    if scope == 'mmdet':
        from mmdet.engine.hooks.utils import trigger_visualization_hook
        trigger_visualization_hook(cfg, args)
    elif scope == 'mmseg':
        hook.update(draw=True)
        if args.show:
            hook.update(show=True, wait_time=args.wait_time)
        if args.show_dir:
            cfg.visualizer.save_dir = args.show_dir
    else:
        hook.update(enable=True, show=args.show, wait_time=args.wait_time,
                    out_dir=args.show_dir,
                    interval=1 if args.interval is None else args.interval)
    if args.interval is not None:
        hook.interval = args.interval


def _add_metric(cfg, metric):
    evaluator = cfg.test_evaluator
    if isinstance(evaluator, (list, tuple)):
        cfg.test_evaluator = [*evaluator, metric]
    elif evaluator.get('type') == 'Evaluator':
        evaluator.metrics = [*evaluator.metrics, metric]
    else:
        cfg.test_evaluator = [evaluator, metric]


def _dump_predictions(cfg, out, scope):
    if scope == 'mmseg':
        evaluators = cfg.test_evaluator
        for metric in (evaluators if isinstance(evaluators,
                                                (list,
                                                 tuple)) else [evaluators]):
            metric.update(output_dir=out, keep_results=True)
        return
    if not out.endswith(('.pkl', '.pickle')):
        raise ValueError(f'--out {out}: predictions are dumped to a pickle '
                         'file; name it *.pkl or *.pickle')
    _add_metric(
        cfg,
        dict(type='DumpDetResults' if scope == 'mmdet' else 'DumpResults',
             out_file_path=out))


def apply_test_options(cfg, args):
    """Change ``cfg`` for the options of :func:`add_test_options` as the
    config's scope's stock test script does, before the Runner is built."""
    scope = cfg.get('default_scope')
    given = [
        flag
        for flag, on in (('--out', args.out), ('--show', args.show),
                         ('--show-dir', args.show_dir), ('--tta', args.tta))
        if on
    ]
    if given and scope not in SCOPES:
        raise ValueError(f'{" ".join(given)}: the config\'s default_scope '
                         f'is {scope!r}; these options follow the test '
                         f'scripts of {", ".join(SCOPES)}')
    if args.out_item is not None:
        if scope != 'mmpretrain':
            raise ValueError('--out-item: only for mmpretrain configs; this '
                             f'config\'s default_scope is {scope!r}')
        if not args.out:
            raise ValueError('--out-item needs --out (the file to write)')
    if args.show or args.show_dir:
        _visualize(cfg, args, scope)
    if args.tta:
        if 'tta_model' not in cfg:
            cfg.tta_model = DEFAULT_TTA_MODELS[scope]
        if (cfg.tta_model.get('type') == 'DetTTAModel'
                and 'mask_head' in set(_keys(cfg.model))):
            raise ValueError(
                '--tta: mmdet\'s DetTTAModel merges boxes only; it does not '
                'support instance segmentation (this model has a mask '
                'head). Set a tta_model of your own in the config, or test '
                'without --tta.')
        dataset = _innermost_dataset(cfg)
        if 'tta_pipeline' not in cfg:
            warnings.warn('--tta: the config has no tta_pipeline; testing '
                          'on the original and the flipped image')
            cfg.tta_pipeline = _flip_tta_pipeline(dataset.pipeline, scope)
        cfg.model = ConfigDict(**cfg.tta_model, module=cfg.model)
        dataset.pipeline = cfg.tta_pipeline
    if args.out and args.out_item != 'metrics':
        _dump_predictions(cfg, args.out, scope)
    if args.amp:
        cfg.test_cfg.fp16 = True
    if args.no_pin_memory:
        cfg.test_dataloader.pin_memory = False


def plain_metrics(metrics: dict) -> dict:
    """``metrics`` (what ``Runner.test`` returns) with every numpy and torch
    value turned into Python numbers and lists, so that ``json`` writes
    them. Needed under NumPy 2: its promotion rules (NEP 50) keep
    float32 through mmseg's ``np.round(mean * 100, 2)``, so ``IoUMetric``
    returns float32 scalars, which ``json`` refuses (float64 ones it
    takes, being ``float``)."""

    def plain(value):
        if isinstance(value, dict):
            return {key: plain(item) for key, item in value.items()}
        if isinstance(value, (list, tuple)):
            return [plain(item) for item in value]
        if isinstance(value, (str, bytes)):
            return value
        tolist = getattr(value, 'tolist', None)  # numpy and torch alike
        return tolist() if callable(tolist) else value

    return plain(metrics)


def write_test_outputs(metrics: dict, args):
    """After the test: ``--out FILE --out-item metrics`` (mmpretrain)
    writes the metrics in FILE's format (json, yaml, pkl)."""
    if args.out and args.out_item == 'metrics':
        import mmengine
        mmengine.dump(metrics, args.out)
        print(f'wrote the metrics to {osp.abspath(args.out)}')
