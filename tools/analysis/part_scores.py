"""Does a trained segmentor tell the part-arrangement set's T objects from
its L objects (:func:`mmhgw.datasets.synthetic.make_isic_arrangements`)?

For each model, over the split's images: the mean foreground probability
on the T objects' pixels, on the L objects' pixels and on the background,
and the arrangement AUC, the chance that a T pixel scores above an L pixel
(0.5: the model cannot tell the two arrangements apart, whatever it does
with the background).

    python tools/analysis/part_scores.py DATA_ROOT \
        --model NAME CONFIG CHECKPOINT [--model ...] [--split val]
        [--json FILE] [--cfg-options k=v ...]

``--cfg-options`` applies to every model, as given to the run that
trained them (e.g. its width); a checkpoint that does not fit its config
is refused rather than scored with random weights where it does not fit.
"""
import argparse
import glob
import json
import os.path as osp

import cv2
import numpy as np
from scipy.stats import rankdata

from mmhgw.config_utils import add_model_args, check_model_args


def arrangement_scores(probs, objects) -> dict:
    """``probs``, ``objects``: sequences of [H, W] arrays (foreground
    probability; 0 background, 1 T, 2 L). Means per kind of pixel and the
    AUC of T against L pixels (Mann-Whitney, ties counted half)."""
    prob = np.concatenate([np.ravel(p) for p in probs]).astype(np.float64)
    kind = np.concatenate([np.ravel(o) for o in objects])
    if prob.shape != kind.shape:
        raise ValueError('each probability map must be the size of its '
                         'object map')
    t, l, b = (prob[kind == k] for k in (1, 2, 0))
    if not len(t) or not len(l):
        raise ValueError('the object maps hold no T or no L pixel')
    ranks = rankdata(np.concatenate([t, l]))
    auc = (ranks[:len(t)].sum() - len(t) *
           (len(t) + 1) / 2) / (len(t) * len(l))
    return dict(T=float(t.mean()), L=float(l.mean()),
                background=float(b.mean()) if len(b) else float('nan'),
                arrangement_auc=float(auc))


def model_probs(config, checkpoint, images, options=None):
    from mmseg.apis import inference_model, init_model

    from mmhgw.config_utils import load_offline_config, merge_cfg_options
    from mmhgw.engine import load_fitting_weights
    cfg = load_offline_config(config)
    merge_cfg_options(cfg, options)
    model = init_model(cfg, None, device='cpu')
    load_fitting_weights(model, checkpoint)
    probs = []
    for path in images:
        logits = inference_model(model, path).seg_logits.data
        probs.append(logits.softmax(0)[1].numpy())
    return probs


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('data_root')
    add_model_args(parser)
    parser.add_argument('--split', default='val')
    parser.add_argument('--json', help='also write the scores here')
    args = parser.parse_args(argv)
    check_model_args(parser, args.model)
    labels = [label for label, _, _ in args.model]
    if len(set(labels)) != len(labels):
        parser.error(f'--model labels must differ (one row each), got '
                     f'{labels}')
    images = sorted(
        glob.glob(osp.join(args.data_root, 'images', args.split, '*.jpg')))
    if not images:
        parser.error(f'no images in {args.data_root}/images/{args.split}')
    objects = []
    for path in images:
        name = osp.splitext(osp.basename(path))[0] + '.png'
        found = osp.join(args.data_root, 'objects', args.split, name)
        if not osp.exists(found):
            parser.error(f'{found} is missing: the object maps come with '
                         'the part-arrangement set (make_demo_data.py '
                         '--only parts)')
        objects.append(cv2.imread(found, cv2.IMREAD_GRAYSCALE))
    rows = {}
    print('| model | T | L | background | arrangement AUC |')
    print('|---|---|---|---|---|')
    for name, config, checkpoint in args.model:
        rows[name] = arrangement_scores(
            model_probs(config, checkpoint, images, args.cfg_options), objects)
        r = rows[name]
        print(
            f'| {name} | {r["T"]:.3f} | {r["L"]:.3f} | '
            f'{r["background"]:.3f} | {r["arrangement_auc"]:.3f} |',
            flush=True)
    if args.json:
        with open(args.json, 'w') as f:
            json.dump(rows, f, indent=1)


if __name__ == '__main__':
    main()
