#!/usr/bin/env bash
# The image, built and run with Debian's podman (issue 27): Containerfile's runtime stage on
# the root file system laid out from a binary built here (FROM_STAGE=prebuilt; this machine
# cannot pull the Rust image its `compiled` stage builds in), run as it ships (uid 1001,
# group 0, the /data volume), then /health, /ready and a webhook call against the running
# container, the store kept in the volume across a restart. Also verifies the systemd
# unit (systemd-analyze verify). Prints the image's size; exits non-zero on any failure.
#
#   bash scripts/container.sh          ACTIONGATE_BIN: the binary (default target/debug/actiongate)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
BIN="${ACTIONGATE_BIN:-$ROOT/target/debug/actiongate}"
log() { printf '[container] %s\n' "$*" >&2; }
fail() { log "FAILED: $*"; exit 1; }

if ! command -v podman >/dev/null || ! command -v runc >/dev/null; then
  log "installing podman and runc (Debian's)"
  apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq podman runc >/dev/null
fi
[ -x "$BIN" ] || cargo build --quiet --bin actiongate

log "systemd-analyze verify deploy/actiongate.service"
unit_dir="$(mktemp -d)"
sed "s|/usr/local/bin/actiongate|$BIN|" deploy/actiongate.service >"$unit_dir/actiongate.service"
systemd-analyze verify "$unit_dir/actiongate.service" || fail "the unit does not verify"
rm -rf "$unit_dir"

# This machine: crun refuses cgroups in hybrid mode and rootful podman's default limits
# pass the hard ones; runc and limits inside them do.
conf="$(mktemp)"
printf '[containers]\ndefault_ulimits = ["nofile=8192:8192", "nproc=4096:4096"]\n' >"$conf"
export CONTAINERS_CONF="$conf"
pm() { podman --runtime runc "$@"; }
name="actiongate-test-$$"
volume="actiongate-data-$$"
port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
cleanup() {
  pm rm -f "$name" >/dev/null 2>&1 || true
  pm volume rm -f "$volume" >/dev/null 2>&1 || true
  pm rmi -f localhost/actiongate:test >/dev/null 2>&1 || true
  rm -f "$conf"
}
trap cleanup EXIT

log "laying out the root file system from $BIN"
sh scripts/container-rootfs.sh "$BIN" target/container/rootfs
log "podman build (FROM_STAGE=prebuilt)"
pm build -q --build-arg FROM_STAGE=prebuilt -t localhost/actiongate:test -f Containerfile . >/dev/null
size="$(pm image inspect localhost/actiongate:test --format '{{.Size}}')"
log "image size: $((size / 1024 / 1024)) MiB"
[ "$(pm image inspect localhost/actiongate:test --format '{{.Config.User}}')" = "1001:0" ] ||
  fail "the image does not run as 1001:0"

start() {
  pm run -d --name "$name" -p "127.0.0.1:$port:5055" -v "$volume:/data" localhost/actiongate:test >/dev/null
  for _ in $(seq 1 100); do
    curl -fsS "http://127.0.0.1:$port/health" >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  pm logs "$name" >&2 || true
  fail "the container never answered /health"
}
start
[ "$(curl -fsS "http://127.0.0.1:$port/health")" = '{"status":"ok"}' ] || fail "/health"
[ "$(curl -fsS "http://127.0.0.1:$port/ready")" = '{"status":"ready"}' ] || fail "/ready"
pid="$(pm inspect "$name" --format '{{.State.Pid}}')"
ids="$(awk '/^Uid:/ {u=$2} /^Gid:/ {g=$2} END {print u, g}' "/proc/$pid/status")"
[ "$ids" = "1001 0" ] || fail "the server runs as uid/gid $ids, not uid 1001 in group 0"
call='{"next_action": "list_subscriptions", "sender_id": "container-test", "version": "3.6.21",
  "tracker": {"sender_id": "container-test", "slots": {"session_started_metadata": {"account_id": "acct-7"}},
              "events": [], "latest_message": {}}, "domain": {}}'
answer="$(curl -fsS -H 'Content-Type: application/json' -d "$call" "http://127.0.0.1:$port/webhook")"
echo "$answer" | python3 -c 'import json,sys; a=json.load(sys.stdin); assert a["events"] and a["responses"], a' ||
  fail "the webhook call: $answer"
log "a webhook call answered: $(echo "$answer" | head -c 160)..."
# The store lives in the volume: it is still there after the container is replaced.
pm rm -f "$name" >/dev/null
start
[ -n "$(pm volume inspect "$volume" --format '{{.Mountpoint}}')" ] || fail "no volume"
ls "$(pm volume inspect "$volume" --format '{{.Mountpoint}}')" | grep -q 'actiongate.db' ||
  fail "the store is not in the /data volume"
log "passed: /health, /ready, a webhook call, uid 1001 in group 0, the store in /data"
