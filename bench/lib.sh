# Shared by the bench scripts (sourced, not run): their common flags and work directory,
# the seed sample's venv, the TLS certificates, the new-change scripts' binaries and service, ports, readiness,
# CPU and memory of a server's process group, and the records and bodies each server
# changes. Expects ROOT set.

# The flags every bench script takes, into DURATION, SIZES, BUILD, OUT and WORKERS (set
# the defaults first; WORKERS is empty unless given): --duration SECONDS, --sizes LIST,
# --no-build, --out FILE, --workers N (the worker threads of actiongate and the ceilings in
# bench/connections.sh; the other scripts leave their servers on their defaults).
bench_args() {
  WORKERS="${WORKERS:-}"
  while [[ $# -gt 0 ]]; do
    case "$1" in
      --duration) DURATION="$2"; shift ;;
      --sizes) SIZES="$2"; shift ;;
      --no-build) BUILD=0 ;;
      --out) OUT="$2"; shift ;;
      --workers) WORKERS="$2"; shift ;;
      *) echo "unknown argument $1" >&2; exit 2 ;;
    esac
    shift
  done
}
# A work directory WORK (/tmp/actiongate-NAME.*), log() prefixed with NAME, and every
# process group started into PIDS stopped and WORK removed on exit.
bench_workdir() { # NAME
  BENCH_NAME="$1"
  log() { printf '[%s] %s\n' "$BENCH_NAME" "$*" >&2; }
  WORK=$(mktemp -d "/tmp/actiongate-$1.XXXXXX")
  PIDS=()
  trap 'bench_cleanup; rm -rf "$WORK"' EXIT
}
bench_cleanup() { for p in "${PIDS[@]}"; do kill -- "-$p" 2>/dev/null || kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; PIDS=(); }

# Makes the venv $VENV from bench/seed_actions/requirements.txt when missing or different.
seed_venv() {
  local requirements="$ROOT/bench/seed_actions/requirements.txt"
  if ! cmp -s "$requirements" "$VENV/.requirements" 2>/dev/null; then
    log "making $VENV from bench/seed_actions/requirements.txt"
    [[ -x "$VENV/bin/python" ]] || python3 -m venv "$VENV"
    "$VENV/bin/pip" install -q -r "$requirements"
    cp "$requirements" "$VENV/.requirements"
  fi
}
need_wrk() {
  command -v wrk >/dev/null || { apt-get install -y wrk >/dev/null 2>&1 || { apt-get update >/dev/null && apt-get install -y wrk >/dev/null; }; }
}
# The bench's TLS certificates, in $WORK: a CA of its own (ca.pem), and with `leaf NAME
# OPENSSL_KEY_ARGS...` a leaf for 127.0.0.1 signed by it (NAME.pem, NAME.key), so a load
# that trusts the CA checks the chain as a client with verification on does.
bench_ca() {
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj /CN=actiongate-bench-ca \
    -keyout "$WORK/ca.key" -out "$WORK/ca.pem" 2>/dev/null
  printf 'subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\n' >"$WORK/leaf.ext"
}
leaf() { # NAME OPENSSL_KEY_ARGS...
  local name="$1"; shift
  openssl req -newkey "$@" -nodes -subj /CN=127.0.0.1 -keyout "$WORK/$name.key" -out "$WORK/$name.csr" 2>/dev/null
  openssl x509 -req -in "$WORK/$name.csr" -CA "$WORK/ca.pem" -CAkey "$WORK/ca.key" -CAcreateserial -days 2 \
    -extfile "$WORK/leaf.ext" -out "$WORK/$name.pem" 2>/dev/null
}
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
cpu_ticks() { awk '{ sub(/.*\) /, ""); print $12 + $13 }' "/proc/$1/stat"; }
wait_http() { for _ in $(seq 300); do curl -skf -o /dev/null "$1" && return 0; sleep 0.2; done; log "not ready: $1"; return 1; }
# The new-change scripts' binaries: actiongate, apply_load, the path's floor and the store alone, built
# unless --no-build; BIN, APPLY_LOAD, FLOOR and STORE_ALONE (ACTIONGATE_BIN, APPLY_LOAD_BIN,
# CHANGE_FLOOR_BIN and STORE_ALONE_BIN point them at other builds).
new_change_bins() {
  if [[ "$BUILD" == 1 ]]; then
    cargo build --release --quiet --bin actiongate
    cargo build --release --quiet -p tools --example apply_load
    cargo build --release --quiet --example change_floor
    cargo build --release --quiet --example store_alone
  fi
  BIN="${ACTIONGATE_BIN:-$ROOT/target/release/actiongate}"
  APPLY_LOAD="${APPLY_LOAD_BIN:-$ROOT/target/release/examples/apply_load}"
  FLOOR="${CHANGE_FLOOR_BIN:-$ROOT/target/release/examples/change_floor}"
  STORE_ALONE="${STORE_ALONE_BIN:-$ROOT/target/release/examples/store_alone}"
}
# The connection scripts' binaries: actiongate, the load that connects for each call and
# the two ceilings, built unless --no-build; BIN (ACTIONGATE_BIN points it at another build).
connection_bins() {
  if [[ "$BUILD" == 1 ]]; then
    cargo build --release --quiet --bin actiongate
    cargo build --release --quiet -p tools --example tls_ceiling --example connect_load
    cargo build --release --quiet -p actionserver --example ceiling
  fi
  BIN="${ACTIONGATE_BIN:-$ROOT/target/release/actiongate}"
}
# Starts `$BIN subscription-service` on a free port, its data in $WORK/service; sets SP
# (its port) and SERVICE_PID, and returns once it serves the seeded record.
start_service() {
  SP=$(free_port)
  setsid "$BIN" subscription-service --port "$SP" --data-dir "$WORK/service" >"$WORK/service.log" 2>&1 &
  PIDS+=($!); SERVICE_PID=$!
  wait_http "http://127.0.0.1:$SP/v1/subscriptions/WS-SUB-3304"
}
# CPU of a server: every process of its group (rasa-sdk serves in a child of its primary).
group_ticks() {
  local total=0 pid t
  for pid in $(ps -o pid= -g "$1"); do
    t=$(cpu_ticks "$pid" 2>/dev/null || echo 0); total=$((total + ${t:-0}))
  done
  echo "$total"
}
# Peak RSS (VmHWM, KiB) of the largest process of a group.
hwm() { local max=0 pid k; for pid in $(ps -o pid= -g "$1"); do k=$(awk '/^VmHWM/ {print $2}' "/proc/$pid/status" 2>/dev/null || echo 0); ((k > max)) && max=$k; done; echo "$max"; }

# Each server changes records of its own (a copy of the demo data's WS-SUB-3304 under
# another id), so its first "yes" makes the change and every later delivery is a repeat.
put_record() { # SERVICE_PORT ID: prints the new record's revision
  python3 - "$1" "$2" <<'PY'
import json, sys, urllib.request
port, rid = sys.argv[1], sys.argv[2]
base = f"http://127.0.0.1:{port}/v1/subscriptions/"
record = json.load(urllib.request.urlopen(base + "WS-SUB-3304"))
record.pop("revision", None)
record["id"] = rid
req = urllib.request.Request(base + rid, data=json.dumps(record).encode(), method="PUT",
                             headers={"Content-Type": "application/json"})
print(json.loads(urllib.request.urlopen(req).read())["revision"])
PY
}
declare -A REVISION
# The body BODY (a file of $WORK: select-10, apply-pro-1000, ...) for record ID, whose
# revision is ${REVISION[ID]}.
body_for() { # BODY ID
  local out="$WORK/$1@$2.json"
  [[ -f "$out" ]] || sed -e "s/WS-SUB-3304 stop_renewal r4/$2 stop_renewal r${REVISION[$2]}/g" \
    -e "s/WS-SUB-3304/$2/g" "$WORK/$1.json" >"$out"
  echo "$out"
}
# The answer of URL to BODY is 200 and names an outcome (printed with NAME).
check_answer() { # NAME URL BODY
  local code
  code=$(curl -sk -o "$WORK/check.out" -w '%{http_code}' -H 'Content-Type: application/json' --data-binary "@$3" "$2/webhook")
  [[ "$code" == 200 ]] || { log "$1: HTTP $code: $(head -c 300 "$WORK/check.out")"; exit 1; }
  python3 -c 'import json,sys; b=json.load(open(sys.argv[1])); s={e["name"]: e.get("value") for e in b["events"] if e.get("event")=="slot"}; print(sys.argv[2], s.get("change_status"), s.get("change_reason"))' "$WORK/check.out" "$1" >&2
}
# One row of $RESULTS: CMD run (it prints the RESULT line of bench/post_body.lua) while
# the CPU of the server's process group PID is counted; requests/s, p99 ms, CPU µs per
# request, failed requests.
record_run() { # ACTION SIZE NAME PID CMD...
  local action="$1" size="$2" name="$3" pid="$4" line c0 c1
  shift 4
  c0=$(group_ticks "$pid")
  line=$("$@" 2>&1 | awk '/^RESULT/ {print $2, $3, $4, $5, $6, $7}')
  c1=$(group_ticks "$pid")
  read -r rps p50 p99 requests bad sock <<<"$line"
  python3 - "$action" "$size" "$name" "$rps" "$p99" "$requests" "$bad" "$sock" "$((c1 - c0))" "$(getconf CLK_TCK)" >>"$RESULTS" <<'PY'
import sys
action, size, name, rps, p99, requests, bad, sock, ticks, tck = sys.argv[1:]
cpu = int(ticks) / int(tck) * 1e6 / max(1, int(requests))
print("\t".join([action, size, name, "%.0f" % float(rps), "%.2f" % (int(p99) / 1000), "%.0f" % cpu, str(int(bad) + int(sock))]))
PY
  log "$(tail -1 "$RESULTS")"
}
# A row for a server under wrk: a 2 s warm-up, then one timed run posting BODY to URL.
measure() { # ACTION SIZE NAME URL PID BODY
  local url="$4" body="$6"
  BENCH_BODY="$body" wrk -t2 -c16 -d2s -s "$ROOT/bench/post_body.lua" "$url" >/dev/null 2>&1
  BENCH_BODY="$body" record_run "$1" "$2" "$3" "$5" \
    wrk -t2 -c16 -d"${DURATION}s" --timeout 30s --latency -s "$ROOT/bench/post_body.lua" "$url"
}
