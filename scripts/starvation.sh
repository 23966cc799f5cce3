#!/usr/bin/env bash
# Hostile clients on loopback against a running actiongate (issue 24): PER_KIND connections
# of each kind held open (silent ones on the webhook, gRPC and console ports; uploads that
# declare 64 MiB and send nothing; bodies trickled a byte every 5 s), reopened as the server
# closes them, while a valid webhook call, a gRPC call and a console page are sampled, each
# on a new connection. Prints the callers' p50/p99/max and errors and the hostile
# connections' counts. The server starts under a 1024 soft limit on open files (systemd's
# default), which it raises to the hard limit.
#
#   bash scripts/starvation.sh [PER_KIND] [SECONDS]     (default 2000, 40)
#
# ACTIONGATE_BIN: the server to measure (default target/release/actiongate, built if
# missing); measures, asserts nothing.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PER_KIND="${1:-2000}"
SECONDS_TO_RUN="${2:-40}"
BIN="${ACTIONGATE_BIN:-$ROOT/target/release/actiongate}"
log() { printf '[starvation] %s\n' "$*" >&2; }

if [ ! -x "$BIN" ]; then
  log "building $BIN"
  cargo build --release --quiet --bin actiongate
fi
# The driver in release too: on two cores, a debug driver's own CPU would be measured.
cargo build --release --quiet -p tools --example starvation
DRIVER="$ROOT/target/release/examples/starvation"

hard=$(ulimit -Hn)
need=$((PER_KIND * 5 + 512))
if [ "$hard" != "unlimited" ] && [ "$hard" -lt "$need" ]; then
  PER_KIND=$(( (hard - 512) / 5 ))
  log "the hard open-file limit is $hard: $PER_KIND connections of each kind"
fi

work="$(mktemp -d)"
trap 'kill "${server_pid:-}" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$work"' EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
port=$(free_port); grpc=$(free_port); admin=$(free_port); service=$(free_port)
hash=$(printf 'starvation passphrase\n' | "$BIN" hash-password)
cat > "$work/endpoints.yml" <<YAML
actiongate:
  console:
    operators:
      - name: ana
        password_hash: "$hash"
YAML
(
  ulimit -Sn 1024
  exec "$BIN" serve --host 127.0.0.1 --port "$port" --grpc-port "$grpc" --admin-port "$admin" \
    --embedded-service-port "$service" --data-dir "$work/data" --endpoints "$work/endpoints.yml"
) > "$work/server.log" 2>&1 &
server_pid=$!
for _ in $(seq 1 100); do
  curl -fsS "http://127.0.0.1:$port/health" >/dev/null 2>&1 && break
  sleep 0.1
done
grep -m1 "open-file limit" "$work/server.log" >&2 || true
ulimit -n "$hard"
targets=(--webhook "http://127.0.0.1:$port" --grpc "http://127.0.0.1:$grpc"
  --console "http://127.0.0.1:$admin" --per-kind "$PER_KIND")
# The hostile clients in a process of their own at the lowest CPU priority (a remote
# attacker's CPU is not this machine's; what the server spends on them is still measured),
# the callers sampled from another once they are open.
nice -n 19 "$DRIVER" "${targets[@]}" --only hostile --seconds "$SECONDS_TO_RUN" \
  >"$work/hostile.out" &
hostile_pid=$!
sleep 6
"$DRIVER" "${targets[@]}" --only callers --seconds $((SECONDS_TO_RUN - 6))
wait "$hostile_pid"
cat "$work/hostile.out"
if grep -q "Too many open files" "$work/server.log"; then
  log "the server ran out of descriptors at some point:"
  grep -c "Too many open files" "$work/server.log" >&2
fi
