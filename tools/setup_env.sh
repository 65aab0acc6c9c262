#!/usr/bin/env bash
# Creates, completes or repairs the project's virtual environment in $VENV.
# Order matters: torch first, then mmcv's build tools, then mmcv compiled
# against that torch with its ops, then the rest, then mmhgw itself.
# Each step is skipped when what it installs is already importable, so a
# second run costs seconds. PIP_FIND_LINKS is honoured by pip as usual.
# Repairs: a venv whose python does not run is made anew; one without pip
# gets it (ensurepip); an mmcv whose compiled ops no longer import (torch
# changed underneath, say) is rebuilt, not reported as installed.
set -euo pipefail

VENV=${VENV:-.venv}
PYTHON=${PYTHON:-python3}
PIP="$VENV/bin/python -m pip"

die() { echo "[setup] error: $*" >&2; exit 1; }

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

if [ -e "$VENV" ] && ! "$VENV/bin/python" -c '' 2>/dev/null; then
    # Half-created, or its interpreter is gone: start it again.
    echo "[setup] $VENV has no working python; creating it anew"
    "$PYTHON" -m venv --clear "$VENV"
elif [ ! -e "$VENV" ]; then
    echo "[setup] creating $VENV with $($PYTHON --version)"
    "$PYTHON" -m venv "$VENV"
fi
if ! $PIP --version >/dev/null 2>&1; then
    echo "[setup] $VENV has no pip; installing it with ensurepip"
    "$VENV/bin/python" -m ensurepip --upgrade >/dev/null \
        || die "ensurepip failed in $VENV; remove it and run again"
fi
if ! have "pip>=24" packaging; then
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

# The compiled ops, not just the package: they break when torch changes.
mmcv_ops_work() { "$VENV/bin/python" -c "from mmcv.ops import nms" 2>/dev/null; }

mapfile -t mmcv_reqs < <(reqs requirements/mmcv.txt)
if ! have "${mmcv_reqs[@]}" || ! mmcv_ops_work; then
    export MMCV_WITH_OPS=1
    if [ -z "${FORCE_CUDA:-}" ] && command -v nvcc >/dev/null 2>&1 \
        && command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1 \
        && "$VENV/bin/python" -c "import torch,sys; sys.exit(0 if torch.version.cuda else 1)"; then
        export FORCE_CUDA=1
    fi
    # Fail now, not 20 minutes into the build. A prebuilt wheel offered
    # through PIP_FIND_LINKS needs no compiler.
    cxx=${CXX:-}
    if [ -z "$cxx" ]; then
        for candidate in c++ g++ clang++; do
            if command -v "$candidate" >/dev/null 2>&1; then cxx=$candidate; break; fi
        done
    fi
    if [ -z "${PIP_FIND_LINKS:-}" ] && { [ -z "$cxx" ] || ! command -v "$cxx" >/dev/null 2>&1; }; then
        die "no C++ compiler found (c++, g++ or clang++ on PATH, or \$CXX):" \
            "mmcv's ops are compiled from source. Install one (e.g." \
            "apt-get install g++) or offer a prebuilt mmcv wheel through PIP_FIND_LINKS."
    fi
    repair=()
    if have "${mmcv_reqs[@]}"; then
        # Installed but its ops do not import: pip would call it satisfied,
        # and its wheel cache would hand back the same broken build.
        echo "[setup] mmcv is installed but its ops do not import; rebuilding it"
        repair=(--force-reinstall --no-deps --no-cache-dir)
    fi
    echo "[setup] building ${mmcv_reqs[*]} with ops (FORCE_CUDA=${FORCE_CUDA:-0});" \
         "from source this takes ~20 min on 2 cores"
    $PIP install --no-build-isolation "${repair[@]}" "${mmcv_reqs[@]}"
    if ! mmcv_ops_work; then
        "$VENV/bin/python" -c "from mmcv.ops import nms" || true
        die "mmcv was installed but its ops still do not import (see above)"
    fi
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
# torchvision: configs that start from torchvision:// weights (the stock
# mmdet ResNets' init_cfg) and MMPretrain import it. It is kept only if it
# works with the installed torch: PyPI's Linux wheel is built for PyPI's
# torch (a CUDA build, which also runs on CPUs) and fails in its compiled
# ops next to a +cpu torch from PyTorch's index. The outcome is stamped
# with the installed versions of both; while they stay the same, later runs
# neither check (an import of torch, seconds) nor download again.
torchvision_works() {
    "$VENV/bin/python" -c "import torch, torchvision; from torchvision.ops import nms
nms(torch.zeros(1, 4), torch.ones(1), 0.5)" >/dev/null 2>&1
}
torch_pair() {
    "$VENV/bin/python" -c "import importlib.metadata as md
def version(name):
    try:
        return md.version(name)
    except md.PackageNotFoundError:
        return 'none'
print('torch', version('torch'), 'torchvision', version('torchvision'))"
}
mapfile -t torchvision_reqs < <(reqs requirements/torchvision.txt)
torchvision_stamp="$VENV/.torchvision-checked"
if [ "$(cat "$torchvision_stamp" 2>/dev/null)" != "$(torch_pair)" ]; then
    if ! torchvision_works; then
        torch_version="$("$VENV/bin/python" -c "import torch; print(torch.__version__)")"
        echo "[setup] installing ${torchvision_reqs[*]} (--no-deps) for torch $torch_version"
        if ! { $PIP install -q --no-deps "${torchvision_reqs[@]}" && torchvision_works; }; then
            $PIP uninstall -q -y torchvision >/dev/null 2>&1 || true
            echo "[setup] note: the package index has no ${torchvision_reqs[*]} that works" \
                 "with torch $torch_version; left out. Configs loading torchvision:// weights" \
                 "and MMPretrain need one: for a +cpu torch," \
                 "pip install --no-deps ${torchvision_reqs[*]} --index-url" \
                 "https://download.pytorch.org/whl/cpu" >&2
        fi
    fi
    torch_pair > "$torchvision_stamp"
fi

# Checked from outside the repository, where only an installed mmhgw imports,
# and as make test / make demo will use it.
venv_python="$(cd "$VENV" && pwd)/bin/python"
works() { (cd / && "$venv_python" -c "import torch, mmdet, mmseg, mmhgw; from mmcv.ops import nms" 2>/dev/null); }
if ! works; then
    if ! (cd / && "$venv_python" -c "import mmhgw" 2>/dev/null); then
        echo "[setup] installing mmhgw in editable mode"
        $PIP install -q --no-deps --no-build-isolation -e .
    fi
    if ! works; then
        (cd / && "$venv_python" -c "import torch, mmdet, mmseg, mmhgw; from mmcv.ops import nms") || true
        die "the environment in $VENV does not import (see above)"
    fi
fi

# The C++ kernels of the routing op (mmhgw/_ext*.so, built in place by the
# editable install): rebuilt when missing or older than their sources. A
# failed build leaves the torch fallback (the op warns), not a broken set-up.
ext_stale() {
    local so
    so="$(ls mmhgw/_ext*.so 2>/dev/null | head -n 1)"
    [ -z "$so" ] && return 0
    [ -n "$(find mmhgw/ops/csrc setup.py -newer "$so" -type f 2>/dev/null)" ]
}
if [ "${MMHGW_NO_EXT:-0}" != 1 ] && ext_stale; then
    echo "[setup] building the C++ routing kernels (mmhgw._ext)"
    "$venv_python" setup.py -q build_ext --inplace >/dev/null 2>&1 ||
        echo "[setup] warning: building mmhgw._ext failed; the routing op will fall back to torch" >&2
    rm -rf build
fi
echo "[setup] environment ready: $VENV"
