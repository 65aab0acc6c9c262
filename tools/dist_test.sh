#!/usr/bin/env bash
# Distributed testing: tools/dist_test.sh CONFIG CHECKPOINT NUM_PROCS [args]
CONFIG=$1
CHECKPOINT=$2
NPROCS=$3
PORT=${PORT:-29500}
PYTHON=${PYTHON:-python}
shift 3
"$PYTHON" -m torch.distributed.run --nproc_per_node="$NPROCS" \
    --master_port="$PORT" "$(dirname "$0")/test.py" "$CONFIG" "$CHECKPOINT" \
    --launcher pytorch "$@"
