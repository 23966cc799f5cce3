#!/usr/bin/env bash
# Load and soak: mixed list/select/apply/health traffic at a fixed rate for a bounded
# time while the subscription service is slow for 5% of calls and failing for 2%, and its
# change events reach actiongate twice each, in batches newest first, 10% held back half a
# second and 10% never.
#
#   bash scripts/soak.sh [--duration SECS] [--rate PER_SEC]    (default 120 s at 200/s)
#   SOAK_PROFILE=release bash scripts/soak.sh                   (the build that ships)
#
# Builds with the `soak` profile (Cargo.toml: the release profile, quicker to build) unless
# SOAK_PROFILE names another, starts the subscription service (with its injected faults) and
# actiongate on loopback, runs crates/tools/examples/soak.rs, stops both. Passes when nothing fails
# unexpectedly, no change is doubled, and the server's RSS stays flat; then, from both
# databases, every change the service made is resolved as applied in actiongate's store (by
# an event, a check or the reconciler), every operation resolved as applied has its change at
# the service, none resolved as failed has one, and no event was a mismatch.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
DURATION=120
RATE=200
while [ $# -gt 0 ]; do
  case "$1" in
    --duration) DURATION="$2"; shift 2 ;;
    --rate) RATE="$2"; shift 2 ;;
    *) echo "usage: $0 [--duration SECS] [--rate PER_SEC]" >&2; exit 2 ;;
  esac
done
PROFILE="${SOAK_PROFILE:-soak}"
cargo build --profile "$PROFILE" --quiet --bin actiongate --example soak
BIN_DIR="${CARGO_TARGET_DIR:-target}/$PROFILE"
WORK=$(mktemp -d "${TMPDIR:-/tmp}/actiongate-soak.XXXXXX")
PIDS=()
cleanup() {
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'; }
SERVICE_PORT=$(free_port)
SERVER_PORT=$(free_port)
EVENTS_PORT=$(free_port)
export ACTIONGATE_EVENTS_SECRET="soak-$RANDOM-$RANDOM"
"$BIN_DIR/actiongate" subscription-service --port "$SERVICE_PORT" --data-dir "$WORK/service" \
  --fault-slow-percent 5 --fault-slow-ms 2500 --fault-fail-percent 2 \
  --events-url "http://127.0.0.1:$EVENTS_PORT/v1/service-events" --events-copies 2 --events-reorder \
  --events-delay-percent 10 --events-delay-ms 500 --events-drop-percent 10 \
  --quiet 2>"$WORK/service.log" &
PIDS+=($!)
"$BIN_DIR/actiongate" serve --host 127.0.0.1 --port "$SERVER_PORT" --endpoints /dev/null \
  --data-dir "$WORK/server" --subscriptions-url "http://127.0.0.1:$SERVICE_PORT" --subscriptions-timeout 1 \
  --rate-capacity 1000000 --reconcile-interval 5 --events-port "$EVENTS_PORT" \
  --quiet 2>"$WORK/server.log" &
SERVER_PID=$!
PIDS+=("$SERVER_PID")
for _ in $(seq 1 100); do
  curl -sf "http://127.0.0.1:$SERVER_PORT/health" >/dev/null 2>&1 && curl -s "http://127.0.0.1:$SERVICE_PORT/v1/changes/x" >/dev/null 2>&1 && break
  sleep 0.1
done
# The server's warnings (the injected faults) go to a log; its tail is shown on failure.
if ! "$BIN_DIR/examples/soak" --server "http://127.0.0.1:$SERVER_PORT" --service "http://127.0.0.1:$SERVICE_PORT" \
  --pid "$SERVER_PID" --duration "$DURATION" --rate "$RATE"; then
  echo "---- last lines of the server's log ----" >&2
  tail -n 30 "$WORK/server.log" >&2
  exit 1
fi
echo "service events (actiongate's /metrics):"
curl -s "http://127.0.0.1:$SERVER_PORT/metrics" | grep '^actiongate_service_events_total' | sed 's/^/  /'
# Both stores, read directly: every change made is resolved as applied, nothing is
# resolved wrongly, no event was a mismatch. The reconciler (every 5 s) covers the events
# that were dropped; give it a few passes.
python3 - "$WORK/server/actiongate.db" "$WORK/service/subscriptions.db" <<'PY'
import sqlite3, sys, time
server, service = sys.argv[1], sys.argv[2]
def read():
    made = {k for (k,) in sqlite3.connect(service).execute("SELECT request_key FROM changes WHERE state = 'done'")}
    db = sqlite3.connect(server)
    ops = dict(db.execute("SELECT request_key, state FROM operations"))
    verdicts = dict(db.execute("SELECT verdict, COUNT(*) FROM service_events GROUP BY verdict"))
    return made, ops, verdicts
deadline = time.time() + 30
while True:
    made, ops, verdicts = read()
    unresolved = [k for k in made if ops.get(k) != "applied"]
    if not unresolved or time.time() > deadline:
        break
    time.sleep(1)
wrongly_applied = [k for k, s in ops.items() if s == "applied" and k not in made]
wrongly_failed = [k for k, s in ops.items() if s == "failed" and k in made]
states = {}
for s in ops.values():
    states[s] = states.get(s, 0) + 1
print(f"operations by state: {dict(sorted(states.items()))}; changes made at the service: {len(made)}")
print(f"events by verdict: {dict(sorted(verdicts.items()))}")
checks = [
    ("every change made is resolved as applied", not unresolved),
    ("no operation resolved as applied without its change", not wrongly_applied),
    ("no operation resolved as failed with its change made", not wrongly_failed),
    ("no event was a mismatch", verdicts.get("mismatch", 0) == 0),
    ("events resolved or confirmed operations", verdicts.get("resolved", 0) + verdicts.get("confirmed", 0) > 0),
]
for name, ok in checks:
    print(("ok     " if ok else "FAILED ") + name)
for k in (unresolved + wrongly_applied + wrongly_failed)[:10]:
    print("  ", k, ops.get(k))
sys.exit(0 if all(ok for _, ok in checks) else 1)
PY
