#!/usr/bin/env bash
# The validation conformance suite: rasa-sdk 3.21.1 and actiongate's SDK, serving the same
# validation actions (tests/validation/actions.py, crates/actionserver/examples/
# validation.rs), answer the same HTTP webhook calls as Rasa 3.6.21 sends them
# (tests/validation/conformance.py): statuses and JSON bodies compared.
#
# Needs: python3 (3.11), cargo. The venv is the gRPC suite's (.venv-grpc), made from the
# pinned list tests/grpc/requirements.txt when missing or different. GRPC_VENV overrides
# its place. actiongate listens on 127.0.0.1; rasa-sdk has no option for the address and
# listens on every interface. Both are stopped on exit.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
VENV="${GRPC_VENV:-$ROOT/.venv-grpc}"
REQUIREMENTS="$ROOT/tests/grpc/requirements.txt"
log() { printf '[validation-conformance] %s\n' "$*"; }

stamp="$VENV/.requirements"
if ! cmp -s "$REQUIREMENTS" "$stamp" 2>/dev/null; then
  log "making $VENV from tests/grpc/requirements.txt"
  [[ -x "$VENV/bin/python" ]] || python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q -r "$REQUIREMENTS"
  cp "$REQUIREMENTS" "$stamp"
fi

cargo build --quiet -p actionserver --example validation
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
SDK_PORT=$(free_port)
OURS_PORT=$(free_port)
LOGS=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$LOGS"; }
trap cleanup EXIT

# From the repo root, so that `tests.validation.actions` imports (`tests` is a namespace
# package: it has no __init__.py, and needs none).
"$VENV/bin/python" -m rasa_sdk --actions tests.validation.actions -p "$SDK_PORT" \
  >"$LOGS/rasa-sdk.log" 2>&1 &
pids+=($!)
target/debug/examples/validation "$OURS_PORT" >"$LOGS/actiongate.log" 2>&1 &
pids+=($!)

ready() {
  "$VENV/bin/python" - "$1" <<'PY' >/dev/null 2>&1
import sys, urllib.request
urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/health", timeout=1).read()
PY
}
for port in "$SDK_PORT" "$OURS_PORT"; do
  for _ in $(seq 1 100); do ready "$port" && break; sleep 0.2; done
  ready "$port" || { log "nothing serves on $port"; cat "$LOGS"/*.log; exit 1; }
done
log "rasa-sdk on :$SDK_PORT, actiongate on :$OURS_PORT"
"$VENV/bin/python" tests/validation/conformance.py "$SDK_PORT" "$OURS_PORT"
