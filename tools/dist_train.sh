#!/usr/bin/env bash
# Distributed training: tools/dist_train.sh CONFIG NUM_PROCS [train.py args]
# On a machine without GPUs the processes use the gloo backend on the CPU.
CONFIG=$1
NPROCS=$2
if [ $# -lt 2 ] || ! [[ "$2" =~ ^[1-9][0-9]*$ ]]; then
    echo "usage: $0 CONFIG NUM_PROCS [train.py args]: NUM_PROCS must be a whole number >= 1, got '${2-}'" >&2
    exit 2
fi
PORT=${PORT:-29500}
PYTHON=${PYTHON:-python}
shift 2
"$PYTHON" -m torch.distributed.run --nproc_per_node="$NPROCS" \
    --master_port="$PORT" "$(dirname "$0")/train.py" "$CONFIG" \
    --launcher pytorch "$@"
