#!/usr/bin/env bash
# Creates (or completes) the project's virtual environment in $VENV.
# Order matters: torch first, then mmcv's build tools, then mmcv compiled
# against that torch with its ops, then the rest, then mmhgw itself.
# Each step is skipped when what it installs is already importable, so a
# second run costs seconds. PIP_FIND_LINKS is honoured by pip as usual.
set -euo pipefail

VENV=${VENV:-.venv}
PYTHON=${PYTHON:-python3}
PIP="$VENV/bin/python -m pip"

have() { "$VENV/bin/python" - "$@" <<'PY' 2>/dev/null
import importlib.metadata as md, sys
from packaging.requirements import Requirement
for spec in sys.argv[1:]:
    req = Requirement(spec)
    try:
        version = md.version(req.name)
    except md.PackageNotFoundError:
        sys.exit(1)
    if req.specifier and not req.specifier.contains(version, prereleases=True):
        sys.exit(1)
PY
}

reqs() { grep -v '^\s*#' "$1" | sed '/^\s*$/d'; }

if [ ! -x "$VENV/bin/python" ]; then
    echo "[setup] creating $VENV with $($PYTHON --version)"
    "$PYTHON" -m venv "$VENV"
    $PIP install -q --upgrade "pip>=24" packaging
fi

mapfile -t torch_reqs < <(reqs requirements/torch.txt)
# A torch that the user installed on purpose (a CUDA build of the pinned
# release, say) is kept: only the release number is checked.
if ! have "${torch_reqs[@]}"; then
    echo "[setup] installing ${torch_reqs[*]}"
    $PIP install "${torch_reqs[@]}"
fi

mapfile -t build_reqs < <(reqs requirements/build.txt)
if ! have "${build_reqs[@]}"; then
    echo "[setup] installing build tools ${build_reqs[*]}"
    $PIP install -q "${build_reqs[@]}"
fi

mapfile -t mmcv_reqs < <(reqs requirements/mmcv.txt)
if ! have "${mmcv_reqs[@]}" || ! "$VENV/bin/python" -c "import mmcv.ops" 2>/dev/null; then
    export MMCV_WITH_OPS=1
    if [ -z "${FORCE_CUDA:-}" ] && command -v nvcc >/dev/null 2>&1 \
        && command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1 \
        && "$VENV/bin/python" -c "import torch,sys; sys.exit(0 if torch.version.cuda else 1)"; then
        export FORCE_CUDA=1
    fi
    echo "[setup] building ${mmcv_reqs[*]} with ops (FORCE_CUDA=${FORCE_CUDA:-0});" \
         "from source this takes ~20 min on 2 cores"
    $PIP install --no-build-isolation "${mmcv_reqs[@]}"
fi

mapfile -t runtime_reqs < <(reqs requirements/runtime.txt)
mapfile -t test_reqs < <(reqs requirements/tests.txt)
if ! have "${runtime_reqs[@]}" "${test_reqs[@]}"; then
    echo "[setup] installing runtime and test requirements"
    $PIP install -q "${torch_reqs[@]}" "${mmcv_reqs[@]}" "${runtime_reqs[@]}" "${test_reqs[@]}"
fi

# MMPretrain (configs/pretrain) with --no-deps: its list names its few light
# dependencies, so nothing installed above changes version.
mapfile -t pretrain_reqs < <(reqs requirements/pretrain.txt)
if ! have "${pretrain_reqs[@]}"; then
    echo "[setup] installing ${pretrain_reqs[0]} and its light dependencies (--no-deps)"
    $PIP install -q --no-deps "${pretrain_reqs[@]}"
fi
# MMPretrain imports torchvision; PyPI's Linux torchvision wheels are CUDA
# builds, so it is added next to a CUDA torch only (the tests stand in for it
# where it is missing).
if "$VENV/bin/python" -c "import torch,sys; sys.exit(0 if torch.version.cuda else 1)" 2>/dev/null \
    && ! have "torchvision==0.28.0"; then
    echo "[setup] installing torchvision==0.28.0 (--no-deps) for the CUDA torch"
    $PIP install -q --no-deps "torchvision==0.28.0"
fi

# Checked from outside the repository, where only an installed mmhgw imports.
venv_python="$(cd "$VENV" && pwd)/bin/python"
if ! (cd / && "$venv_python" -c "import mmhgw" 2>/dev/null); then
    echo "[setup] installing mmhgw in editable mode"
    $PIP install -q --no-deps --no-build-isolation -e .
fi
echo "[setup] environment ready: $VENV"
