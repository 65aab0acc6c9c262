"""Parameters of every HGWCaps config's model against its stock counterpart.

The counterpart of a config is the first of its ``_base_`` files that is not
an mmhgw base (followed until a stock model is reached), so the table needs
no list to maintain. Prints a table and writes it into docs/benchmarks.md.

    python tools/analysis/param_table.py [--no-write]
"""
import argparse
import ast
import glob
import os.path as osp

from mmhgw.benchmarking import markdown_table, write_section
from mmhgw.config_utils import build_config_model, load_offline_config

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))

#: The paper's whole-model ratios (Table "obj" and Table c3).
PAPER_RATIOS = {
    'mask-rcnn_hgwcaps-r101': 35.7 / 44.1,
    'unet-hgwcaps': 23.7 / 31.4,
    'deeplabv3plus_hgwcaps': 48.3 / 59.5,
}


def bases(path):
    """The ``_base_`` entries of a config file, resolved to paths."""
    tree = ast.parse(open(path).read())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
                getattr(t, 'id', None) == '_base_' for t in node.targets):
            value = ast.literal_eval(node.value)
            value = [value] if isinstance(value, str) else value
            return [
                v if '::' in v else osp.normpath(osp.join(
                    osp.dirname(path), v)) for v in value
            ]
    return []


def is_hgw(path):
    return 'hgwcaps' in osp.basename(path)


def stock_counterpart(path):
    for base in bases(path):
        if '_base_' in base and '::' not in base:
            continue  # mmhgw's shared settings, not a model
        return stock_counterpart(base) if is_hgw(base) else base
    raise ValueError(f'{path}: no stock base config found')


def count(path):
    model = build_config_model(load_offline_config(path))
    return sum(p.numel() for p in model.parameters())


def pairs():
    # configs/ablations/ change routing or loss terms of a config listed
    # here, not its parameters.
    configs = sorted(p for p in glob.glob(
        osp.join(ROOT, 'configs', '**', '*.py'), recursive=True)
                     if '_base_' not in p and is_hgw(p)
                     and osp.basename(osp.dirname(p)) != 'ablations')
    return [(p, stock_counterpart(p)) for p in configs]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--no-write', action='store_true')
    args = parser.parse_args()
    rows, cache = [], {}
    for hgw, stock in pairs():
        for p in (hgw, stock):
            if p not in cache:
                cache[p] = count(p)
        ratio = cache[hgw] / cache[stock]
        paper = next((f'{v:.2f}' for k, v in PAPER_RATIOS.items()
                      if osp.basename(hgw).startswith(k)), '')
        rows.append([
            osp.relpath(hgw, ROOT),
            stock if '::' in stock else osp.relpath(stock, ROOT),
            f'{cache[stock] / 1e6:.2f}M', f'{cache[hgw] / 1e6:.2f}M',
            f'{ratio:.2f}', paper
        ])
        print(rows[-1], flush=True)
    body = ('Whole-model parameters as built from the configs (the paper '
            'reports R-101 Mask R-CNN, UNet and DeepLabV3+; lower is better, '
            'the paper\'s ratio is the bar to beat).\n\n' + markdown_table([
                'config', 'stock counterpart', 'stock', 'HGWCaps', 'ratio',
                'paper ratio'
            ], rows))
    print(body)
    if not args.no_write:
        write_section('param-table', 'Parameters: HGWCaps configs vs stock',
                      body)


if __name__ == '__main__':
    main()
