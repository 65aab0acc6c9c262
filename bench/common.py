"""Helpers shared by the benchmark scripts: timing, memory, report sections."""
import datetime
import os
import platform
import re
import statistics
import sys
import time

import torch

DOC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(
    __file__))), 'docs', 'benchmarks.md')


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
    lines = ['| ' + ' | '.join(header) + ' |',
             '|' + '|'.join('---' for _ in header) + '|']
    lines += ['| ' + ' | '.join(str(c) for c in row) + ' |' for row in rows]
    return '\n'.join(lines)


def write_section(key, title, body, device='cpu'):
    """Replace (or append) the section ``key`` of docs/benchmarks.md."""
    command = 'python ' + ' '.join(sys.argv)
    stamp = datetime.date.today().isoformat()
    section = (f'<!-- {key}:begin -->\n## {title}\n\n'
               f'Command: `{command}`  \nMachine: {machine(device)}  \n'
               f'Date: {stamp}\n\n{body}\n<!-- {key}:end -->')
    text = open(DOC).read() if os.path.exists(DOC) else \
        '# Benchmarks\n\nEach section is written by the script it names.\n'
    pattern = re.compile(f'<!-- {re.escape(key)}:begin -->.*?'
                         f'<!-- {re.escape(key)}:end -->', re.S)
    if pattern.search(text):
        text = pattern.sub(lambda _: section, text)
    else:
        text = text.rstrip('\n') + '\n\n' + section + '\n'
    os.makedirs(os.path.dirname(DOC), exist_ok=True)
    with open(DOC, 'w') as f:
        f.write(text)
    print(f'wrote section {key!r} of {DOC}')
