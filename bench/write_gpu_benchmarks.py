"""The GPU sections of docs/benchmarks.md from a run of tools/gpu_suite.py.

    python bench/write_gpu_benchmarks.py OUT/gpu_suite.json
        [--doc docs/benchmarks.md] [--allow-dry-run]

Writes, each in place of the section of the same key (or appended), every
other section left as it is:

triton-tuning-cuda         the Triton kernels' tiles and float32 products
                           (tune-triton)
routing-op-cuda            the routing op vs the 3x3 convolution (bench-op)
layer-hgw-auto-cuda        the capsule layer vs the convolution (bench-layer)
models-mask-rcnn-b2-cuda   Mask R-CNN inference and training step
                           (bench-mask-rcnn)
training-amp-cuda          stock and HGWCaps training with --amp: time per
                           iteration, losses, memory, the metric after it
gpu-suite-cuda             the environment, every stage's status and time,
                           the test counts and failures

The measurement sections are rendered by the bench scripts' own table
code. A stage that did not end ok leaves its section as it was (the suite
section says why). Each section names the device and its software, the
command (the stage's, and the suite's that ran it) and the date of the run.
A dry run's JSON is refused unless ``--allow-dry-run`` (its figures are a
CPU's, under the GPU sections' keys).
"""
import argparse
import json
import os.path as osp
import shlex

from mmhgw.benchmarking import DOC, markdown_table, write_section

ROOT = osp.dirname(osp.dirname(osp.abspath(__file__)))

#: Arguments of the stage commands that only route the results.
PLUMBING = {'--no-write': 0, '--json': 1, '--work-dir': 1}
FAMILIES = {
    'train-unet': 'UNet s5-d16, lesion set (128x128, batch 4)',
    'train-deeplabv3plus': 'DeepLabV3+ R-50-D8, lesion set (128x128, '
    'batch 4)',
    'train-mask-rcnn': 'Mask R-CNN R-50 FPN, shapes set (160x128, batch 2)',
}
METRICS = (('mIoU', 'mIoU {:.1f}'), ('coco/bbox_mAP', 'bbox mAP {:.3f}'),
           ('coco/segm_mAP', 'segm mAP {:.3f}'))


def short_command(command):
    """A stage's command as a reader runs it: ``python``, paths relative
    to the repository, without the arguments that route the results."""
    words, kept, skip = shlex.split(command), [], 0
    for word in words[1:]:
        if skip:
            skip -= 1
        elif word in PLUMBING:
            skip = PLUMBING[word]
        else:
            kept.append(
                osp.relpath(word, ROOT) if word.startswith(ROOT +
                                                           osp.sep) else word)
    return shlex.join(['python'] + kept)


def machine_text(report):
    env = report['environment']
    parts = [f'{env.get("device", "?")}']
    if env.get('nvidia_smi') and not env['nvidia_smi'].startswith('not '):
        parts.append(f'nvidia-smi: {env["nvidia_smi"]}')
    parts.append(f'CUDA {env.get("cuda")}, torch {env.get("torch")}, Triton '
                 f'{env.get("triton")}, Python {env.get("python")}, numpy '
                 f'{env.get("numpy")}, mmcv {env.get("mmcv")}')
    text = '; '.join(parts)
    return ('dry run on a CPU (not GPU figures): ' +
            text if report.get('dry_run') else text)


def info(report, stage=None):
    """What a section names: the stage's command (the suite's when there
    is no single one) and the suite's, the machine and the date."""
    runs = report['stages'].get(stage, {}).get('commands', []) if stage \
        else []
    command = short_command(runs[0]['command']) if runs else None
    return dict(command=command or report['command'],
                via=report['command'] if command else None,
                machine=machine_text(report), date=report['date'])


def ok(report, stage):
    return report['stages'].get(stage, {}).get('status') == 'ok'


def tuning_section(report, doc):
    import tune_triton  # a script beside this one
    r = report['stages']['tune-triton']['result']
    body = tune_triton.section_body(r['rows'], tuple(r['feature_map']),
                                    r['rounds'],
                                    cuda=not report.get('dry_run'))
    write_section('triton-tuning-cuda',
                  'Triton routing kernels: tiles and float32 products', body,
                  info=info(report, 'tune-triton'), doc=doc)


def op_section(report, doc):
    import bench_op  # a script beside this one
    result = report['stages']['bench-op']['result']
    body = bench_op.section_body([tuple(r) for r in result['rows']],
                                 tuple(result['feature_map']),
                                 cuda=not report.get('dry_run'))
    write_section('routing-op-cuda',
                  'Routing op vs 3x3 convolution (routing-op-cuda)', body,
                  info=info(report, 'bench-op'), doc=doc)


def layer_section(report, doc):
    import bench_layer  # a script beside this one
    r = report['stages']['bench-layer']['result']
    body = bench_layer.section_body(r['results'], r['solver_cfg'],
                                    r['routing'], r['backend'],
                                    cuda=not report.get('dry_run'))
    key = f'layer-{r["routing"]}-{r["backend"]}-cuda'
    write_section(key, f'HGWCaps layer vs 3x3 convolution ({key})', body,
                  info=info(report, 'bench-layer'), doc=doc)


def mask_rcnn_section(report, doc):
    import bench_models  # a script beside this one
    r = report['stages']['bench-mask-rcnn']['result']
    key, title, body = bench_models.section('mask-rcnn',
                                            r['groups']['mask-rcnn'],
                                            r['repeats'], r.get('rounds', 1),
                                            r['batch'], 'cuda')
    write_section(key, title, body, info=info(report, 'bench-mask-rcnn'),
                  doc=doc)


def metric_text(run):
    val = run.get('val') or {}
    found = [fmt.format(val[key]) for key, fmt in METRICS if key in val]
    return ', '.join(found) or '-'


def training_rows(report):
    rows = []
    for stage, family in FAMILIES.items():
        entry = report['stages'].get(stage, {})
        result = entry.get('result')
        if not result:
            continue
        stock = result['runs'].get('stock', {})
        for label, run in result['runs'].items():
            time_s = run.get('iter_time_s')
            ratio = ''
            if label != 'stock' and time_s and stock.get('iter_time_s'):
                ratio = f' ({time_s / stock["iter_time_s"]:.2f}x)'
            problem = (
                'stopped at its time limit' if run.get('timed_out') else
                f'exit {run["returncode"]}' if run.get('returncode') else
                '' if run.get('losses_finite') else 'non-finite loss')
            loss = (f'{run["loss_first"]:.3f} -> {run["loss_last"]:.3f}'
                    if run.get('loss_first') is not None else '-')
            rows.append([
                family, 'HGWCaps' if label == 'hgwcaps' else 'stock',
                f'{run.get("iters", 0)} of {result["iters"]}',
                f'{time_s * 1e3:.0f}{ratio}' if time_s else '-', loss,
                f'{run["memory_mib"]:.0f}' if run.get('memory_mib') else '-',
                metric_text(run), problem or 'ok'
            ])
    return rows


def training_section(report, doc):
    rows = training_rows(report)
    if not rows:
        return
    results = [
        report['stages'][s]['result'] for s in FAMILIES
        if (report['stages'].get(s) or {}).get('result')
    ]
    amp = any(r['amp'] for r in results)
    interval = max(r['log_interval'] for r in results)
    body = (
        'The demo configs (`configs/demo/`) on the built-in sets, trained '
        f'from scratch{" with `--amp`" if amp else ""}, each schedule '
        'stretched to the iterations run, no checkpoint. Time per iteration: '
        'the median over the logging intervals (the means of '
        f'{interval} iteration{"s" if interval > 1 else ""} '
        'each) after the first one, which holds the warm-up (cuDNN\'s '
        'search, Triton\'s compilation); ratio against the stock model of '
        'the same family. Losses: first and last logged interval. Memory: '
        'mmengine\'s peak CUDA allocation. Metric: the validation after '
        'the last iteration.\n\n' + markdown_table([
            'model', 'variant', 'iterations', 'ms / iteration', 'loss',
            'peak memory (MiB)', 'metric', 'run'
        ], rows))
    write_section('training-amp-cuda', 'Training with AMP: HGWCaps vs stock '
                  '(training-amp-cuda)', body, info=info(report), doc=doc)


def tests_text(name, result):
    text = (f'{name}: {result["passed"]} passed, {result["failures"]} '
            f'failed, {result["errors"]} errors, {result["skipped"]} '
            f'skipped ({result["tests"]} tests, {result["seconds"]:.0f} s)')
    if result.get('failed'):
        text += '\n' + ''.join(f'\n- `{f}`' for f in result['failed'][:20])
    return text


def suite_section(report, doc):
    env = report['environment']
    keys = ('device', 'device_memory_gib', 'nvidia_smi', 'nvcc', 'cpu_count',
            'python', 'torch', 'cuda', 'cudnn', 'triton', 'numpy', 'scipy',
            'opencv-python-headless', 'setuptools', 'mmcv', 'mmengine',
            'mmdet', 'mmsegmentation', 'mmpretrain', 'shapely', 'pycocotools',
            'pot')
    env_table = markdown_table(['', 'version'],
                               [[k, env[k]]
                                for k in keys if env.get(k) is not None])
    stage_rows = []
    for name, stage in report['stages'].items():
        reason = (stage.get('reason') or '').strip().splitlines()
        stage_rows.append([
            name, stage['status'],
            stage.get('seconds', '-'),
            reason[-1][:160].replace('|', '/') if reason else ''
        ])
    tests = [
        tests_text(label, report['stages'][name]['result'])
        for name, label in (('test-cuda', '`tests/test_cuda.py`'),
                            ('tests', 'whole suite'))
        if (report['stages'].get(name, {}).get('result') or {}
            ).get('tests') is not None
    ]
    cpus = report['cpus']
    cores = (f'all stages shared the same {len(cpus["timing"])} cores'
             if cpus['timing'] == cpus['build'] else
             f'the timed stages ran on {len(cpus["timing"])} cores of their '
             f'own, the mmcv build and the test suite on the other '
             f'{len(cpus["build"])}')
    body = (
        f'Budget {report["budget_s"]:.0f} s, '
        f'{report.get("elapsed_s", 0):.0f} s used; {cores}.\n\n' + env_table +
        '\n\n' +
        markdown_table(['stage', 'status', 'seconds', 'note'], stage_rows) +
        ('\n\n' + '\n\n'.join(tests) if tests else ''))
    write_section('gpu-suite-cuda', 'GPU suite run (gpu-suite-cuda)', body,
                  info=info(report), doc=doc)


SECTIONS = (
    ('tune-triton', tuning_section),
    ('bench-op', op_section),
    ('bench-layer', layer_section),
    ('bench-mask-rcnn', mask_rcnn_section),
)


def write(report, doc=DOC):
    """Write every section the report has results for; returns their
    stage names."""
    written = []
    for stage, writer in SECTIONS:
        if ok(report, stage):
            writer(report, doc)
            written.append(stage)
    if training_rows(report):
        training_section(report, doc)
        written.append('training')
    suite_section(report, doc)
    written.append('suite')
    return written


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('report', help='gpu_suite.json of a suite run')
    parser.add_argument('--doc', default=DOC)
    parser.add_argument('--allow-dry-run', action='store_true')
    args = parser.parse_args(argv)
    try:
        with open(args.report) as f:
            report = json.load(f)
    except (OSError, ValueError) as err:
        parser.error(f'cannot read {args.report}: {err}')
    if report.get('schema') != 1 or 'stages' not in report:
        parser.error(f'{args.report} is not a tools/gpu_suite.py report '
                     '(schema 1)')
    if report.get('dry_run') and not args.allow_dry_run:
        parser.error(f'{args.report} is a dry run: its figures are a CPU\'s '
                     '(pass --allow-dry-run to write them anyway)')
    written = write(report, args.doc)
    print(f'sections from: {", ".join(written)}')


if __name__ == '__main__':
    main()
