"""Generate the built-in demo datasets (COCO, Pascal VOC and ISIC-2018
layouts, and a shape classification set) deterministically from a seed;
no download.

    python tools/make_demo_data.py [--out data/demo] [--seed 0] [--scale 1]
        [--isic-size 128 128]
"""
import argparse
import os.path as osp
import time

from mmhgw.arg_checks import POSITIVE, check_number
from mmhgw.config_utils import check_arg
from mmhgw.datasets.synthetic import make_all
from mmhgw.datasets.synthetic_cls import make_shape_classification


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--out', default='data/demo')
    parser.add_argument('--seed', type=int, default=0)
    parser.add_argument('--scale', type=float, default=1.0,
                        help='multiplies the number of images of each set')
    parser.add_argument(
        '--only', nargs='+', choices=['coco', 'voc', 'isic', 'cls', 'parts'],
        help='sets to make (default: all but parts, the '
        'part-arrangement set of the evidence study)')
    parser.add_argument(
        '--isic-size', nargs=2, type=int, default=[128, 128],
        metavar=('HEIGHT', 'WIDTH'),
        help='size of the lesion images (default 128 128); e.g. 384 512 '
        'for the 4:3 landscape geometry of dermoscopy photographs')
    args = parser.parse_args()
    check_arg(parser, check_number, '--scale', args.scale, POSITIVE)
    if min(args.isic_size) < 16:
        parser.error(f'--isic-size must be at least 16 16, got '
                     f'{args.isic_size[0]} {args.isic_size[1]}')
    start = time.perf_counter()
    segdet = [k for k in (args.only or ('coco', 'voc', 'isic')) if k != 'cls']
    if segdet:
        make_all(args.out, seed=args.seed, scale=args.scale, only=segdet,
                 isic_size=args.isic_size)
    if not args.only or 'cls' in args.only:
        n = lambda k: max(4, int(round(k * args.scale)))  # noqa: E731
        make_shape_classification(osp.join(args.out, 'shapes_cls'), n(200),
                                  n(50), seed=args.seed)
    print(f'demo data under {args.out} in {time.perf_counter() - start:.1f}s')


if __name__ == '__main__':
    main()
