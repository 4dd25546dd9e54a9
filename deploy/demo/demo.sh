#!/usr/bin/env bash
# make demo: start the local broker, run the demo, stop everything.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
export KAFKA_PORT="${DEMO_KAFKA_PORT:-9092}"
KAFKA="$ROOT/deploy/local-kafka/kafka.sh"
already_running=0
if "$KAFKA" status >/dev/null 2>&1; then already_running=1; fi
"$KAFKA" start
if [ "$already_running" = 0 ]; then trap '"$KAFKA" stop' EXIT; fi
cd "$ROOT"
"$ROOT/.venv/bin/python" deploy/demo/demo.py --bootstrap "127.0.0.1:$KAFKA_PORT" "$@"
