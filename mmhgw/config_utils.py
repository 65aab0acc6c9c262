"""Config helpers shared by the tools: loading a config (also one to build
offline on a CPU), merging command-line options, building a config's
model, testing a checkpoint, and the checks of the tools' shared
arguments (``--model``, list options, files, number checks)."""
import logging
import tempfile
from typing import Callable, Optional, Tuple

from mmengine.config import Config

#: ``--cfg-options`` that train without a validation loop, for tools whose
#: evaluation is a separate ``tools/test.py`` run. A large
#: ``train_cfg.val_interval`` does not do it: mmengine's IterBasedTrainLoop
#: also validates after the last iteration.
NO_VALIDATION_OPTIONS = ('val_dataloader=None', 'val_cfg=None',
                         'val_evaluator=None')


def load_config(path: str) -> Config:
    """``Config.fromfile``, also for package-scoped stock configs
    (``'mmdet::...'``)."""
    if '::' in path:
        # Resolved as a config inheriting it would resolve it (get_config
        # would add _scope_ keys that no inheriting config has).
        import os
        import tempfile
        fd, tmp = tempfile.mkstemp(suffix='.py')
        try:
            with os.fdopen(fd, 'w') as f:
                f.write(f'_base_ = [{path!r}]\n')
            return Config.fromfile(tmp)
        finally:
            os.remove(tmp)
    return Config.fromfile(path)


def sync_bn_to_bn(node):
    """Turn every ``SyncBN`` norm config under ``node`` into ``BN``, in
    place (SyncBN needs CUDA and a process group)."""
    if isinstance(node, dict):
        if node.get('type') == 'SyncBN':
            node['type'] = 'BN'
        for value in node.values():
            sync_bn_to_bn(value)
    elif isinstance(node, (list, tuple)):
        for value in node:
            sync_bn_to_bn(value)


def load_offline_config(path: str, seg_size: Optional[Tuple[int, int]] = None,
                        keep_init: bool = False) -> Config:
    """The config ``path`` made ready to build offline on one CPU process.

    Pretrained weights cannot be fetched offline, so ``init_cfg`` /
    ``pretrained`` are dropped (unless ``keep_init``); SyncBN becomes BN
    (it needs a process group); ``seg_size`` shrinks mmseg's fixed input
    padding size.
    """
    cfg = load_config(path)
    if not isinstance(cfg.get('model'), dict):
        raise ValueError(f'{path}: the config has no model dict, got '
                         f'model = {cfg.get("model")!r}')
    if not keep_init:
        cfg.model.pop('pretrained', None)
        if isinstance(cfg.model.get('backbone'), dict):
            cfg.model.backbone.init_cfg = None
    sync_bn_to_bn(cfg.model)
    if seg_size is not None:
        cfg.model.data_preprocessor.size = seg_size
    return cfg


def build_config_model(cfg: Config, init: bool = True):
    """Build ``cfg.model`` in the config's default scope, with its weights
    initialised when ``init``: quietly, warnings aside (mmengine logs a
    line per parameter, which buries a tool's own output)."""
    from mmengine.logging import MMLogger
    from mmengine.registry import MODELS, init_default_scope
    init_default_scope(cfg.get('default_scope', 'mmengine'))
    model = MODELS.build(cfg.model)
    if init:
        logger = MMLogger.get_current_instance()
        level = logger.level
        logger.setLevel(max(level, logging.WARNING))
        try:
            model.init_weights()
        finally:
            logger.setLevel(level)
    return model


def checkpoint_metrics(config: str, checkpoint: str, options=None,
                       change_cfg: Optional[Callable] = None,
                       change_model: Optional[Callable] = None) -> dict:
    """Test metrics of ``checkpoint`` on ``config``'s test set, through the
    stock Runner, quietly, in a temporary work dir, for the analysis tools.

    ``options``: a dict of ``--cfg-options`` (checked as the train and test
    tools check them, :func:`merge_cfg_options`). ``change_cfg(cfg)`` alters
    the merged config in place (e.g. the test pipeline and evaluator);
    ``change_model(model)`` alters the built model in place before the test
    (after it the checkpoint loads, so only what a checkpoint does not hold
    may be changed). A model whose weights do not all load gets no score
    (``CheckpointFitHook``)."""
    from mmengine.runner import Runner

    from mmhgw.engine.hooks import CheckpointFitHook
    from mmhgw.engine.test_options import plain_metrics
    cfg = Config.fromfile(config)
    merge_cfg_options(cfg, options)
    if change_cfg is not None:
        change_cfg(cfg)
    cfg.load_from = checkpoint
    cfg.log_level = 'WARNING'
    cfg.visualizer = dict(type='Visualizer', vis_backends=[])
    with tempfile.TemporaryDirectory() as work_dir:
        cfg.work_dir = work_dir
        runner = Runner.from_cfg(cfg)
        if change_model is not None:
            change_model(runner.model)
        runner.register_hook(CheckpointFitHook(checkpoint, 'test'))
        return plain_metrics(runner.test())


def add_model_args(parser, required=True):
    """``--model LABEL CONFIG CHECKPOINT``, repeatable: the trained models
    an analysis tool tests (models of one label are averaged), and
    ``--cfg-options`` applied to every one of them."""
    from mmengine.config import DictAction
    parser.add_argument('--model', nargs=3, action='append', required=required,
                        metavar=('LABEL', 'CONFIG', 'CHECKPOINT'))
    parser.add_argument('--cfg-options', nargs='+', action=DictAction,
                        help='key=value options for every model')


def add_score_args(parser):
    """``--metric`` (the test metrics to record, ``mIoU`` by default) and
    ``--out`` (the JSON file to write), for the tools that score models."""
    parser.add_argument('--metric', nargs='+', default=['mIoU'],
                        help='test metrics to record')
    parser.add_argument('--out', required=True, help='JSON file to write')


def check_files(parser, named_paths):
    """Refuse, through ``parser``, the first of ``(what, path)`` whose path
    is not a file: ``WHAT PATH not found``, before any work starts."""
    import os.path as osp
    for what, path in named_paths:
        if not osp.isfile(path):
            parser.error(f'{what} {path} not found')


def check_arg(parser, check, name, value, *args):
    """``check(name, value, *args)`` (one of :mod:`mmhgw.arg_checks`) with
    its ValueError turned into the parser's usage error (exit 2)."""
    try:
        check(name, value, *args)
    except ValueError as err:
        parser.error(str(err))


def check_model_args(parser, models):
    """Refuse a ``--model`` whose config or checkpoint is not a file, or
    whose checkpoint another ``--model`` names too (one trained model would
    count as two seeds), naming the model and the path."""
    import os.path as osp
    owners = {}
    for label, config, checkpoint in models:
        check_files(parser, [(f'--model {label}: config', config),
                             (f'--model {label}: checkpoint', checkpoint)])
        key = osp.realpath(checkpoint)
        if key in owners:
            parser.error(f'--model {label}: checkpoint {checkpoint} is '
                         f'already given for --model {owners[key]}; give '
                         'each trained model once')
        owners[key] = label


def check_unique(parser, args, *dests):
    """Refuse a list option (by its ``dest``) that names one value twice,
    as ``--seeds 0 0``: each value is a run or a row of a report, and a
    value named twice would be counted twice (a narrower interval from the
    same data)."""
    for dest in dests:
        seen = set()
        for value in getattr(args, dest) or ():
            if value in seen:
                parser.error(f'--{dest.replace("_", "-")} names {value!r} '
                             'twice; give each value once')
            seen.add(value)


def add_runner_args(parser):
    """The options the train and test tools share (as the stock tools):
    ``--work-dir``, ``--cfg-options``, ``--launcher``, ``--local_rank``."""
    from mmengine.config import DictAction
    parser.add_argument('--work-dir', help='where logs and outputs go')
    parser.add_argument('--cfg-options', nargs='+', action=DictAction,
                        help='override config settings, key=value')
    parser.add_argument('--launcher', default='none',
                        choices=['none', 'pytorch', 'slurm', 'mpi'])
    parser.add_argument('--local_rank', '--local-rank', type=int, default=0)


def merge_cfg_options(cfg: Config, options, set_by_command_line=None):
    """Merge ``--cfg-options`` (``key: value``, as ``DictAction`` gives
    them) into ``cfg`` after checking that each sets something
    (:func:`mmhgw.engine.preflight.check_cfg_options`), and import the
    modules of a ``custom_imports`` among them."""
    if not options:
        return
    from mmhgw.engine.preflight import check_cfg_options, import_option_modules
    check_cfg_options(cfg, options, set_by_command_line)
    cfg.merge_from_dict(options)
    import_option_modules(cfg, options)


def keys_set_by_args(args) -> dict:
    """Top-level config keys that the train / test tools set from their own
    arguments after ``--cfg-options`` are merged: key -> argument."""
    keys = {}
    if getattr(args, 'work_dir', None):
        keys['work_dir'] = '--work-dir'
    if getattr(args, 'checkpoint', None):
        keys['load_from'] = 'the CHECKPOINT argument'
    if getattr(args, 'resume', None) is not None:
        keys.update(resume='--resume', load_from='--resume')
    return keys


def config_from_args(args) -> Config:
    """The config of a train / test command line: ``args.config`` with
    ``--cfg-options`` merged (:func:`merge_cfg_options`), ``launcher`` set and
    ``work_dir`` defaulting to ``./work_dirs/<config name>``, as the stock
    OpenMMLab tools do."""
    import os
    import os.path as osp
    os.environ.setdefault('LOCAL_RANK', str(args.local_rank))
    cfg = Config.fromfile(args.config)
    cfg.launcher = args.launcher
    merge_cfg_options(cfg, args.cfg_options, keys_set_by_args(args))
    if args.work_dir:
        cfg.work_dir = args.work_dir
    elif cfg.get('work_dir') is None:
        cfg.work_dir = osp.join('./work_dirs',
                                osp.splitext(osp.basename(args.config))[0])
    return cfg
