#!/usr/bin/env bash
# Distributed testing: tools/dist_test.sh CONFIG CHECKPOINT NUM_PROCS [args]
CONFIG=$1
CHECKPOINT=$2
NPROCS=$3
if [ $# -lt 3 ] || ! [[ "$3" =~ ^[1-9][0-9]*$ ]]; then
    echo "usage: $0 CONFIG CHECKPOINT NUM_PROCS [test.py args]: NUM_PROCS must be a whole number >= 1, got '${3-}'" >&2
    exit 2
fi
PORT=${PORT:-29500}
PYTHON=${PYTHON:-python}
shift 3
"$PYTHON" -m torch.distributed.run --nproc_per_node="$NPROCS" \
    --master_port="$PORT" "$(dirname "$0")/test.py" "$CONFIG" "$CHECKPOINT" \
    --launcher pytorch "$@"
