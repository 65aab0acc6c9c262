"""Every checkpoint the project reads goes through one function,
``mmhgw.engine.checkpoint.load_checkpoint_file``: no ``torch.load`` (or other
unpickling) elsewhere in the package, the tools or the benchmarks."""
import ast
import glob
import os.path as osp
import pickle
import subprocess
import sys

import pytest
import torch

import mmhgw  # noqa: F401

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
SCANNED = ('mmhgw', 'tools', 'bench')
#: (file, function) of the one deserialising call.
HOME = ('mmhgw/engine/checkpoint.py', 'load_checkpoint_file')
#: Calls that unpickle a file or bytes.
DESERIALISERS = {
    'torch.load', 'torch.serialization.load', 'torch.hub.load',
    'torch.hub.load_state_dict_from_url', 'torch.utils.model_zoo.load_url',
    'pickle.load', 'pickle.loads', 'pickle.Unpickler', 'dill.load',
    'mmengine.utils.dl_utils.load_url', 'mmengine.runner.checkpoint.load_url',
    'mmengine.utils.dl_utils.hub.load_url'
}


def deserialising_calls(source: str):
    """``(line, enclosing function, dotted name)`` of every call in
    ``source`` that unpickles (imports and aliases resolved), or that passes
    ``weights_only``."""
    tree = ast.parse(source)
    aliases = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                aliases[a.asname or a.name.split('.')[0]] = \
                    a.name if a.asname else a.name.split('.')[0]
        elif isinstance(node, ast.ImportFrom) and node.module:
            for a in node.names:
                aliases[a.asname or a.name] = f'{node.module}.{a.name}'

    def dotted(node):
        if isinstance(node, ast.Name):
            return aliases.get(node.id, node.id)
        if isinstance(node, ast.Attribute):
            head = dotted(node.value)
            return head and f'{head}.{node.attr}'
        return None

    found = []

    def visit(node, function):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            function = node.name
        if isinstance(node, ast.Call):
            name = dotted(node.func)
            if name in DESERIALISERS or any(k.arg == 'weights_only'
                                            for k in node.keywords):
                found.append((node.lineno, function, name))
        for child in ast.iter_child_nodes(node):
            visit(child, function)

    visit(tree, None)
    return found


def test_walker_finds_aliased_loads():
    source = ('import torch as T\nfrom torch import load as L\n'
              'import pickle\nfrom torch.hub import load_state_dict_from_url'
              '\ndef f(p):\n    T.load(p)\n    L(p)\n    pickle.loads(p)\n'
              '    load_state_dict_from_url(p)\n'
              '    other(p, weights_only=False)\n    T.save(p)\n')
    calls = deserialising_calls(source)
    assert [c[0] for c in calls] == [6, 7, 8, 9, 10]
    assert {c[1] for c in calls} == {'f'}


def test_every_checkpoint_read_goes_through_the_safe_loader():
    sites = []
    for top in SCANNED:
        for path in sorted(
                glob.glob(osp.join(ROOT, top, '**', '*.py'), recursive=True)):
            rel = osp.relpath(path, ROOT)
            with open(path) as f:
                for line, function, name in deserialising_calls(f.read()):
                    sites.append((rel, function, line, name))
    outside = [s for s in sites if s[:2] != HOME]
    assert not outside, f'checkpoints read around load_checkpoint_file: ' \
        f'{outside}'
    assert [s[:2] for s in sites] == [HOME]  # the home itself is found


class Payload:
    """Pickled as a call of ``print``: refused, never run."""

    def __reduce__(self):
        return (print, ('payload ran', ))


def test_converter_refuses_a_crafted_checkpoint(tmp_path, capsys):
    from tools.model_converters.capsules_from_stock import (ConvertError,
                                                            read_state_dict)
    path = tmp_path / 'crafted.pth'
    torch.save({'state_dict': {'w': torch.ones(1)}, 'x': Payload()}, path)
    with pytest.raises(ConvertError, match='crafted.pth.*not allowed'):
        read_state_dict(str(path))
    assert 'payload ran' not in capsys.readouterr().out
    # A plain state dict (torchvision layout) still reads.
    torch.save({'w': torch.ones(2)}, tmp_path / 'plain.pth')
    assert list(read_state_dict(str(tmp_path / 'plain.pth'))) == ['w']


def test_loader_ignores_the_force_no_weights_only_switch(tmp_path):
    """torch's environment switch back to full unpickling does not reach
    the project's loader."""
    path = tmp_path / 'crafted.pth'
    torch.save({'x': Payload()}, path)
    code = ('import mmhgw, pickle\n'
            'from mmhgw.engine.checkpoint import load_checkpoint_file\n'
            f'try:\n    load_checkpoint_file({str(path)!r})\n'
            'except pickle.UnpicklingError:\n    print("refused")\n')
    done = subprocess.run([sys.executable, '-c', code], capture_output=True,
                          text=True, cwd=ROOT, env=dict(
                              __import__('os').environ,
                              TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD='1'))
    assert done.stdout.split() == ['refused'], done.stderr[-2000:]


def test_mmengine_reads_local_files_through_it(tmp_path):
    from mmengine.runner.checkpoint import CheckpointLoader

    from mmhgw.engine.checkpoint import load_checkpoint_file
    assert CheckpointLoader._get_checkpoint_loader(str(tmp_path)) is \
        load_checkpoint_file
    path = tmp_path / 'crafted.pth'
    torch.save({'x': Payload()}, path)
    with pytest.raises(pickle.UnpicklingError, match='crafted.pth'):
        CheckpointLoader.load_checkpoint(str(path))
