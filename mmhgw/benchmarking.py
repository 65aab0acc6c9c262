"""Measuring and reporting for the benchmark scripts (``bench/``) and
``tools/analysis/param_table.py``: wall time and memory, random layer-like
inputs of the routing op, the machine a run took place on, and the sections
of docs/benchmarks.md that each script writes."""
import datetime
import json
import os
import platform
import re
import statistics
import sys
import time

import torch

from mmhgw import doc_sections

#: The report the scripts write by default: the repository's
#: docs/benchmarks.md (the package is installed editable, from a clone).
DOC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                   'docs', 'benchmarks.md')


def sync(device):
    if torch.device(device).type == 'cuda':
        torch.cuda.synchronize()


def median_time(fn, device='cpu', repeats=5, warmup=1):
    """Median wall time of ``fn()`` in seconds, after ``warmup`` calls."""
    for _ in range(warmup):
        fn()
    sync(device)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        sync(device)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def saved_for_backward_bytes(fn):
    """Bytes of the tensors autograd keeps for the backward of ``fn()``.

    The memory that differs between gradient modes, measured exactly and
    on any device (storage shared by several saved tensors counts once).
    """
    storages = {}

    def pack(t):
        storages[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = fn()
    del out
    return sum(storages.values())


def peak_cuda_bytes(fn):
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    fn()
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated() - base


def random_routing_inputs(M: int, N: int, V_p: int, V_q: int, d: int,
                          dtype: torch.dtype = torch.float64,
                          seed: int = 0) -> list:
    """Layer-like inputs of :func:`mmhgw.ops.hgw_routing`: ``[X_p, X_q, h1,
    h2, row, col, beta]`` for M locations and N output types, with positive
    symmetric structures in [1/2, 1], uniform marginals and beta 1/2."""
    from mmhgw.ot import gw_factors
    g = torch.Generator().manual_seed(seed)
    X_p = torch.randn(M, V_p, d, generator=g, dtype=dtype)
    X_q = torch.randn(N, V_q, d, generator=g, dtype=dtype)
    C_p = 0.5 + 0.5 * torch.rand(M, V_p, V_p, generator=g, dtype=dtype)
    C_q = 0.5 + 0.5 * torch.rand(N, V_q, V_q, generator=g, dtype=dtype)
    C_p, C_q = (C_p + C_p.mT) / 2, (C_q + C_q.mT) / 2
    row, col, h1, h2 = gw_factors(C_p, C_q,
                                  torch.full((V_p, ), 1 / V_p, dtype=dtype),
                                  torch.full((V_q, ), 1 / V_q, dtype=dtype))
    return [X_p, X_q, h1, h2, row, col, torch.tensor(0.5, dtype=dtype)]


def machine(device='cpu'):
    if torch.device(device).type == 'cuda':
        return (f'{torch.cuda.get_device_name()} (CUDA {torch.version.cuda}), '
                f'torch {torch.__version__}')
    cpu = platform.processor() or platform.machine()
    try:
        with open('/proc/cpuinfo') as f:
            cpu = re.search(r'model name\s*:\s*(.*)', f.read()).group(1)
    except (OSError, AttributeError):
        pass
    return (f'{cpu}, {os.cpu_count()} cores, {torch.get_num_threads()} '
            f'torch threads, torch {torch.__version__}')


def markdown_table(header, rows):
    lines = [
        '| ' + ' | '.join(header) + ' |',
        '|' + '|'.join('---' for _ in header) + '|'
    ]
    lines += ['| ' + ' | '.join(str(c) for c in row) + ' |' for row in rows]
    return '\n'.join(lines)


#: Options that only say where a run's results go: left out of the command
#: a report prints, which should reproduce the measurement anywhere.
OUTPUT_OPTIONS = ('--json', )


def reproducing_command(argv):
    """``python`` and ``argv`` without :data:`OUTPUT_OPTIONS` and their
    values (``--json FILE`` or ``--json=FILE``)."""
    kept, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg in OUTPUT_OPTIONS:
            skip = True
        elif not arg.startswith(tuple(o + '=' for o in OUTPUT_OPTIONS)):
            kept.append(arg)
    return 'python ' + ' '.join(kept)


def run_info(device='cpu'):
    """Where and how a measurement was taken: the command, the machine and
    the date, as the report sections print them."""
    return dict(command=reproducing_command(sys.argv), machine=machine(device),
                date=datetime.date.today().isoformat())


def save_json(path, device, **results):
    """Write ``results`` with :func:`run_info` to ``path`` (``--json``)."""
    with open(path, 'w') as f:
        json.dump(dict(run_info(device), **results), f, indent=1)
    print(f'wrote {path}')


def write_section(key, title, body, device='cpu', info=None, doc=DOC):
    """Replace (or append) the section ``key`` of ``doc``
    (docs/benchmarks.md); ``info`` (:func:`run_info` of another run, with
    ``via``: the command that ran that one, if any) replaces this run's
    command, machine and date."""
    info = info or run_info(device)
    via = f' (run by `{info["via"]}`)' if info.get('via') else ''
    section = (f'## {title}\n\n'
               f'Command: `{info["command"]}`{via}  \n'
               f'Machine: {info["machine"]}  \n'
               f'Date: {info["date"]}\n\n{body}')
    doc_sections.write_section(
        doc, key, section,
        new_page='# Benchmarks\n\nEach section is written by the script it '
        'names.\n')
    print(f'wrote section {key!r} of {doc}')
