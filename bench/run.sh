#!/usr/bin/env bash
# Benchmarks actiongate against rasa-sdk 3.21.1 and against a bare actix-web server (the
# transport ceiling), side by side, with the same `count_events` action and realistic Rasa
# webhook bodies of 10, 1,000 and 10,000 events; then the apply path end to end
# ("apply (replayed)": a confirmed apply_subscription_change answered from the store;
# "select → apply": a new change every time, crates/tools/examples/apply_load.rs). It ends with the
# figures checked against the performance targets.
#
# Usage: bench/run.sh [--quick] [--duration SECONDS] [--runs N] [--warmup SECONDS]
#                     [--sizes 10,1000,10000] [--servers rasa-sdk,actiongate,ceiling]
#                     [--no-apply] [--no-grpc] [--no-build] [--sdk-workers N] [--out FILE]
#
#   --quick        1 run of 3 s after a 1 s warm-up (smoke test)
#   --duration S   seconds per timed run (default 10)
#   --runs N       timed runs per server and size; the table shows the median (default 3)
#   --warmup S     seconds of untimed load before the timed runs (default 3)
#   --no-build     use the binaries already in target/release
#   --sdk-workers  rasa-sdk worker processes (ACTION_SERVER_SANIC_WORKERS; default 1,
#                  the SDK's default)
#   --out FILE     where the table goes (default bench/results/latest.md)
#
# Before each cell the script waits up to QUIET_WAIT seconds (environment; default 5, 0 with
# --quick) for the machine to be idle, and lists in the output the cells that started on a
# busy machine: on 2 cores a build next door halves the numbers.
# The servers and wrk run at nice BENCH_NICE (environment; default -10, needs root).
# CEILING_BIN, BENCH_SERVER_BIN, ACTIONGATE_BIN (environment) override the binaries.
#
# Needs: python3 (3.11), cargo, wrk (installed with apt-get when missing), curl.
# Every server listens on 127.0.0.1 only; everything started here is stopped on exit.
# A full run takes about 9 minutes.

set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

DURATION=10
RUNS=3
WARMUP=3
THREADS=2
CONNECTIONS=16
SIZES="10,1000,10000"
SERVERS="rasa-sdk,actiongate,ceiling"
APPLY=1
GRPC=1
BUILD=1
SDK_WORKERS=1
OUT="bench/results/latest.md"
SDK_VERSION="3.21.1"
VENV="$ROOT/.venv-bench"

while [[ $# -gt 0 ]]; do
  case "$1" in
    --quick) DURATION=3; RUNS=1; WARMUP=1; QUIET_WAIT="${QUIET_WAIT:-0}" ;;
    --duration) DURATION="$2"; shift ;;
    --runs) RUNS="$2"; shift ;;
    --warmup) WARMUP="$2"; shift ;;
    --sizes) SIZES="$2"; shift ;;
    --servers) SERVERS="$2"; shift ;;
    --no-apply) APPLY=0 ;;
    --no-grpc) GRPC=0 ;;
    --no-build) BUILD=0 ;;
    --sdk-workers) SDK_WORKERS="$2"; shift ;;
    --out) OUT="$2"; shift ;;
    -h|--help) sed -n '2,30p' "$0"; exit 0 ;;
    *) echo "unknown argument: $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done

log() { printf '[bench] %s\n' "$*" >&2; }

WORK="$(mktemp -d /tmp/actiongate-bench.XXXXXX)"
PIDS=()

cleanup() {
  local pid
  for pid in "${PIDS[@]:-}"; do
    [[ -n "$pid" ]] || continue
    # Each server runs in its own process group (setsid): stop the group, so rasa-sdk's
    # worker processes go too.
    kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
  done
  for pid in "${PIDS[@]:-}"; do
    [[ -n "$pid" ]] || continue
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL -- "-$pid" 2>/dev/null || true
  done
  PIDS=()
}
trap 'cleanup; rm -rf "$WORK"' EXIT
trap 'exit 130' INT TERM

# --- tools -------------------------------------------------------------------------------

if ! command -v wrk >/dev/null; then
  log "installing wrk"
  apt-get install -y wrk >/dev/null 2>&1 || { apt-get update >/dev/null && apt-get install -y wrk >/dev/null; }
fi
command -v curl >/dev/null || { apt-get install -y curl >/dev/null 2>&1 || { apt-get update >/dev/null && apt-get install -y curl >/dev/null; }; }

if [[ ",$SERVERS," == *",rasa-sdk,"* ]]; then
  if ! "$VENV/bin/python" -c "import rasa_sdk, sys; sys.exit(rasa_sdk.__version__ != '$SDK_VERSION')" 2>/dev/null; then
    log "creating $VENV with rasa-sdk==$SDK_VERSION"
    [[ -x "$VENV/bin/python" ]] || python3 -m venv "$VENV"
    "$VENV/bin/pip" install -q "rasa-sdk==$SDK_VERSION"
  fi
fi

if [[ "$BUILD" == 1 ]]; then
  log "cargo build --release --bins --examples"
  cargo build --release --bins --examples
fi
# Overridable, e.g. to time binaries built elsewhere.
CEILING_BIN="${CEILING_BIN:-$ROOT/target/release/examples/ceiling}"
BENCH_SERVER_BIN="${BENCH_SERVER_BIN:-$ROOT/target/release/examples/bench_server}"
ACTIONGATE_BIN="${ACTIONGATE_BIN:-$ROOT/target/release/actiongate}"
APPLY_LOAD_BIN="${APPLY_LOAD_BIN:-$ROOT/target/release/examples/apply_load}"
GRPC_LOAD_BIN="${GRPC_LOAD_BIN:-$ROOT/target/release/examples/grpc_load}"
export VENV SDK_VERSION

# Everything from here on (servers, wrk, helpers) runs at a higher priority (nice
# $BENCH_NICE, default -10, root only) so that other work on the machine disturbs it less.
BENCH_NICE="${BENCH_NICE:--10}"
NICE_NOTE="nice 0"
if [[ "$BENCH_NICE" != 0 ]] && renice -n "$BENCH_NICE" -p $$ >/dev/null 2>&1; then
  NICE_NOTE="nice $BENCH_NICE"
fi
export NICE_NOTE

log "generating bodies in $WORK"
python3 bench/make_bodies.py "$WORK" --sizes "$SIZES" >&2

# --- helpers -----------------------------------------------------------------------------

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# start NAME PORT: starts a server in its own process group; prints its pid.
start() {
  local name="$1" port="$2" logf="$WORK/$1.log"
  case "$name" in
    ceiling) setsid "$CEILING_BIN" "$port" >"$logf" 2>&1 & ;;
    actiongate) setsid "$BENCH_SERVER_BIN" "$port" >"$logf" 2>&1 & ;;
    actiongate-grpc) setsid "$BENCH_SERVER_BIN" "$port" 0 --grpc >"$logf" 2>&1 & ;;
    rasa-sdk-grpc)
      (cd bench && ACTION_SERVER_SANIC_WORKERS="$SDK_WORKERS" PYTHONDONTWRITEBYTECODE=1 \
        exec setsid "$VENV/bin/python" -m rasa_sdk --actions rasa_sdk_actions --grpc -p "$port") \
        >"$logf" 2>&1 & ;;
    rasa-sdk)
      (cd bench && SANIC_HOST=127.0.0.1 ACTION_SERVER_SANIC_WORKERS="$SDK_WORKERS" PYTHONDONTWRITEBYTECODE=1 \
        exec setsid "$VENV/bin/python" -m rasa_sdk --actions rasa_sdk_actions -p "$port") \
        >"$logf" 2>&1 & ;;
    apply)
      # From $WORK, so no endpoints.yml of the caller's is picked up; default logging
      # (one INFO line per request), as in production.
      (cd "$WORK" && exec setsid "$ACTIONGATE_BIN" serve --host 127.0.0.1 --port "$port" \
        --embedded-service-port 0 --data-dir "$WORK/apply-data") >"$logf" 2>&1 & ;;
    apply-load)
      # As `apply`, with the embedded service on a known port (APPLY_SERVICE_PORT) for the
      # driver to create records on, and the per-account rate limit lifted: every request
      # here is a new change, and the limiter would measure itself.
      (cd "$WORK" && exec setsid "$ACTIONGATE_BIN" serve --host 127.0.0.1 --port "$port" \
        --embedded-service-port "$APPLY_SERVICE_PORT" --data-dir "$WORK/apply-load-data" \
        --rate-capacity 1000000) >"$logf" 2>&1 & ;;
    *) echo "unknown server $name" >&2; return 1 ;;
  esac
  echo $!
}

wait_ready() { # NAME PID PORT
  local i
  for i in $(seq 300); do
    if curl -sf -o /dev/null "http://127.0.0.1:$3/health"; then return 0; fi
    if ! kill -0 "$2" 2>/dev/null; then
      log "$1 exited during start-up:"; tail -20 "$WORK/$1.log" >&2; return 1
    fi
    sleep 0.2
  done
  log "$1 not ready after 60 s:"; tail -20 "$WORK/$1.log" >&2; return 1
}

# wait_ready_grpc NAME PID PORT BODY EXPECTED: until one gRPC call answers correctly.
wait_ready_grpc() {
  local i
  for i in $(seq 300); do
    if "$GRPC_LOAD_BIN" --port "$3" --body "$4" --check "$5" >/dev/null 2>&1; then return 0; fi
    if ! kill -0 "$2" 2>/dev/null; then
      log "$1 exited during start-up:"; tail -20 "$WORK/$1.log" >&2; return 1
    fi
    sleep 0.2
  done
  log "$1 not ready after 60 s:"; tail -20 "$WORK/$1.log" >&2; return 1
}

# The processes that serve requests: for rasa-sdk the Sanic workers (children of the
# primary doing the work, i.e. with real CPU time), otherwise the process itself.
serving_pids() { # NAME PID
  if [[ "$1" != rasa-sdk ]]; then echo "$2"; return; fi  # (rasa-sdk --grpc: one process)
  python3 - "$2" <<'EOF'
import os, sys
leader = int(sys.argv[1])
procs = {}
for d in os.listdir("/proc"):
    if not d.isdigit():
        continue
    try:
        with open(f"/proc/{d}/stat") as f:
            st = f.read().rsplit(")", 1)[1].split()
    except OSError:
        continue
    procs[int(d)] = (int(st[1]), int(st[2]), int(st[11]) + int(st[12]))  # ppid, pgid, cpu
kids = [p for p, (ppid, pgid, cpu) in procs.items() if pgid == leader and p != leader]
# Workers are the children that burned CPU under load (not multiprocessing's resource tracker).
busy = [p for p in kids if procs[p][2] >= 20]
print(" ".join(map(str, busy or kids or [leader])))
EOF
}

peak_rss_mib() { # PIDS... : sum of VmHWM
  local total=0 pid kb
  for pid in "$@"; do
    kb=$(awk '/^VmHWM:/ {print $2}' "/proc/$pid/status" 2>/dev/null || echo 0)
    total=$((total + ${kb:-0}))
  done
  awk -v kb="$total" 'BEGIN { printf "%.1f", kb / 1024 }'
}

reset_peak_rss() { # PIDS... : VmHWM := current RSS (so each size reports its own peak)
  local pid
  for pid in "$@"; do echo 5 >"/proc/$pid/clear_refs" 2>/dev/null || true; done
}

# check NAME PORT BODY EXPECTED: one request, answer must be 200 application/json with
# event_count == EXPECTED.
check_count() {
  local hdr="$WORK/check.hdr" out="$WORK/check.out"
  curl -s -D "$hdr" -o "$out" -H 'Content-Type: application/json' --data-binary "@$3" \
    "http://127.0.0.1:$2/webhook"
  python3 - "$1" "$hdr" "$out" "$4" <<'EOF'
import json, sys
name, hdr, out, expected = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
head = open(hdr, encoding="latin-1").read().lower()
status = head.split("\r\n", 1)[0]
assert " 200" in status, f"{name}: {status}: {open(out).read()[:300]}"
assert "content-type: application/json" in head, f"{name}: not application/json:\n{head}"
body = json.load(open(out))
if name == "ceiling":
    assert body == {"events": [], "responses": []}, body
    sys.exit(0)
events = body["events"]
assert len(events) == 1 and events[0]["event"] == "slot" and events[0]["name"] == "event_count", body
assert events[0]["value"] == expected, f"{name}: event_count {events[0]['value']} != {expected}"
assert body["responses"] == [], body
EOF
}

# drive PORT BODY SECONDS: one wrk run (with DRIVER=grpc, one grpc_load run, the same
# number of connections); prints "rps p50_us p99_us requests bad_status sock_errors"
DRIVER=http
drive() {
  if [[ "$DRIVER" == grpc ]]; then
    "$GRPC_LOAD_BIN" --port "$1" --body "$2" --duration "$3" --connections "$CONNECTIONS" \
      --threads "$THREADS" 2>&1 | awk '/^RESULT/ {print $2, $3, $4, $5, $6, $7}'
    return
  fi
  BENCH_BODY="$2" wrk -t"$THREADS" -c"$CONNECTIONS" -d"${3}s" --timeout 30s --latency \
    -s bench/post_body.lua "http://127.0.0.1:$1" 2>&1 | awk '/^RESULT/ {print $2, $3, $4, $5, $6, $7}'
}

# wait_idle PIDS...: after wrk stops, a server may still be working through requests whose
# connections are gone (rasa-sdk with big bodies: up to a second). Waits (at most 15 s) until
# the serving processes use no more CPU, so one run's backlog does not slow the next.
wait_idle() {
  python3 - "$@" <<'EOF'
import os, sys, time
tick = os.sysconf("SC_CLK_TCK")
def cpu():
    total = 0
    for pid in sys.argv[1:]:
        try:
            st = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
            total += int(st[11]) + int(st[12])
        except OSError:
            pass
    return total
deadline = time.time() + 15
last = cpu()
while time.time() < deadline:
    time.sleep(0.25)
    now = cpu()
    if now - last <= 0.02 * tick:   # under 8 % of a core
        break
    last = now
EOF
}

# busy_percent: how busy the whole machine is over one second (other work skews results on
# 2 cores: a cargo build next door halves everything).
busy_percent() {
  python3 - <<'EOF'
import time
def snap():
    f = list(map(int, open("/proc/stat").readline().split()[1:]))
    return sum(f), f[3] + f[4]
t0, i0 = snap(); time.sleep(1); t1, i1 = snap()
print(round(100 * (1 - (i1 - i0) / max(1, t1 - t0))))
EOF
}

# quiet LABEL: waits (at most $QUIET_WAIT s) for the machine to be idle before a cell;
# records the cells that started on a busy machine.
QUIET_WAIT="${QUIET_WAIT:-5}"
NOISY="$WORK/noisy.txt"
: >"$NOISY"
quiet() {
  local busy waited=0
  busy=$(busy_percent)
  while (( busy > 10 && waited < QUIET_WAIT )); do
    (( waited == 0 )) && log "machine ${busy}% busy before $1; waiting up to ${QUIET_WAIT}s"
    sleep 1; waited=$((waited + 2))
    busy=$(busy_percent)
  done
  (( busy > 10 )) && { log "starting $1 on a ${busy}% busy machine"; echo "$1: ${busy}% busy at start" >>"$NOISY"; }
  return 0
}

RESULTS="$WORK/results.tsv"
: >"$RESULTS"

cpu_ticks() { # PIDS... : user+system CPU time of the processes (all threads), in clock ticks
  local pid total=0 t
  for pid in "$@"; do
    t=$(awk '{ sub(/.*\) /, ""); print $12 + $13 }' "/proc/$pid/stat" 2>/dev/null || echo 0)
    total=$((total + ${t:-0}))
  done
  echo "$total"
}
CLK_TCK=$(getconf CLK_TCK)

# measure LABEL SIZE_LABEL NAME PORT BODY PID: warm-up, RUNS timed runs, one TSV row:
# size, server, req/s, p50 us, p99 us, peak RSS MiB, errors, server CPU us per request
measure() {
  local label="$1" size="$2" name="$3" port="$4" body="$5"; shift 5
  local runs="$WORK/runs.txt" i line c0 c1
  : >"$runs"
  quiet "$label/$size"
  drive "$port" "$body" "$WARMUP" >/dev/null
  local pids
  pids=$(serving_pids "$name" "$1")
  # shellcheck disable=SC2086
  wait_idle $pids
  # shellcheck disable=SC2086
  reset_peak_rss $pids
  for i in $(seq "$RUNS"); do
    # shellcheck disable=SC2086
    [[ "$i" == 1 ]] || wait_idle $pids
    # shellcheck disable=SC2086
    c0=$(cpu_ticks $pids)
    line=$(drive "$port" "$body" "$DURATION")
    # shellcheck disable=SC2086
    c1=$(cpu_ticks $pids)
    [[ -n "$line" ]] || { log "wrk gave no result for $label/$size"; line="0 0 0 0 0 0"; }
    echo "$line $((c1 - c0))" >>"$runs"
  done
  local rss
  # shellcheck disable=SC2086
  rss=$(peak_rss_mib $pids)
  python3 - "$runs" "$size" "$label" "$rss" "$CLK_TCK" >>"$RESULTS" <<'EOF'
import statistics, sys
rows = [list(map(float, l.split())) for l in open(sys.argv[1]) if l.strip()]
med = [statistics.median(col) for col in zip(*rows)]
errors = int(sum(r[4] + r[5] for r in rows))
requests = sum(r[3] for r in rows)
cpu_us = sum(r[6] for r in rows) / float(sys.argv[5]) * 1e6 / requests if requests else 0
print("\t".join([sys.argv[2], sys.argv[3], "%.1f" % med[0], "%d" % med[1], "%d" % med[2],
                 sys.argv[4], str(errors), "%.0f" % cpu_us]))
EOF
  log "$(tail -1 "$RESULTS")"
}

# --- count_events: three servers, three sizes ---------------------------------------------

IFS=, read -r -a SIZE_LIST <<<"$SIZES"
IFS=, read -r -a SERVER_LIST <<<"$SERVERS"

for n in "${SIZE_LIST[@]}"; do
  body="$WORK/events-$n.json"
  kib=$(( $(stat -c %s "$body") / 1024 ))
  for name in "${SERVER_LIST[@]}"; do
    case "$name" in
      ceiling) bin="$CEILING_BIN" ;;
      actiongate) bin="$BENCH_SERVER_BIN" ;;
      rasa-sdk) bin="$VENV/bin/python" ;;
      *) log "unknown server $name"; exit 2 ;;
    esac
    if [[ ! -x "$bin" ]]; then log "skipping $name: $bin missing"; continue; fi
    port=$(free_port)
    pid=$(start "$name" "$port")
    PIDS+=("$pid")
    wait_ready "$name" "$pid" "$port"
    check_count "$name" "$port" "$body" "$n"
    log "$name on :$port answers $n events correctly; measuring"
    measure "$name" "$n events ($kib KiB)" "$name" "$port" "$body" "$pid"
    cleanup
  done
done

# --- count_events over gRPC: rasa-sdk --grpc and actiongate's ActionService ---------------

if [[ "$GRPC" == 1 && -x "$GRPC_LOAD_BIN" ]]; then
  DRIVER=grpc
  for n in "${SIZE_LIST[@]}"; do
    body="$WORK/events-$n.json"
    kib=$(( $(stat -c %s "$body") / 1024 ))
    for name in "${SERVER_LIST[@]}"; do
      [[ "$name" == rasa-sdk || "$name" == actiongate ]] || continue
      port=$(free_port)
      pid=$(start "$name-grpc" "$port")
      PIDS+=("$pid")
      wait_ready_grpc "$name-grpc" "$pid" "$port" "$body" "$n"
      log "$name --grpc on :$port answers $n events correctly; measuring"
      measure "$name --grpc" "$n events ($kib KiB)" "$name-grpc" "$port" "$body" "$pid"
      cleanup
    done
  done
  DRIVER=http
fi

# --- how long parsing takes alone, for the breakdown of actiongate's CPU per request ---------

PARSE="$WORK/parse.tsv"
: >"$PARSE"
if [[ ",$SERVERS," == *",actiongate,"* && -x "$BENCH_SERVER_BIN" ]]; then
  for n in "${SIZE_LIST[@]}"; do
    body="$WORK/events-$n.json"
    quiet "parse/$n"
    times=$("$BENCH_SERVER_BIN" --parse "$body")
    us=$(awk '/^parse_us/ {print $2}' <<<"$times")
    check_us=$(awk '/^check_us/ {print $2}' <<<"$times")
    printf '%s events (%s KiB)\t%s\t%s\n' "$n" "$(( $(stat -c %s "$body") / 1024 ))" "$us" "$check_us" >>"$PARSE"
    log "parsing $n events alone: $us us (checking it is JSON: $check_us us)"
  done
fi

# --- the apply path, end to end ------------------------------------------------------------

if [[ "$APPLY" == 1 ]]; then
  if [[ -x "$ACTIONGATE_BIN" ]] && "$ACTIONGATE_BIN" serve --help 2>/dev/null | grep -q -- --embedded-service-port; then
    body="$WORK/apply.json"
    port=$(free_port)
    pid=$(start apply "$port")
    PIDS+=("$pid")
    wait_ready apply "$pid" "$port"
    for attempt in first replay; do
      curl -s -o "$WORK/apply.out" -w '%{http_code}\n' -H 'Content-Type: application/json' \
        --data-binary "@$body" "http://127.0.0.1:$port/webhook" >"$WORK/apply.code"
      python3 - "$attempt" "$WORK/apply.code" "$WORK/apply.out" <<'EOF'
import json, sys
attempt, code, out = sys.argv[1], open(sys.argv[2]).read().strip(), open(sys.argv[3]).read()
assert code == "200", f"apply ({attempt}): HTTP {code}: {out[:500]}"
slots = {e.get("name"): e.get("value") for e in json.loads(out)["events"] if e.get("event") == "slot"}
assert slots.get("change_status") == "applied", f"apply ({attempt}): {out[:800]}"
EOF
    done
    log "apply answers 'applied' (first and replayed); measuring the replay"
    measure "actiongate apply (replayed)" "apply ($(( $(stat -c %s "$body") / 1024 )) KiB)" \
      apply "$port" "$body" "$pid"
    cleanup

    # Every request a new change: select, the question and a "yes", apply; closed loop with
    # as many customers as wrk has connections (crates/tools/examples/apply_load.rs), RUNS runs, median.
    APPLY_SERVICE_PORT=$(free_port)
    port=$(free_port)
    pid=$(start apply-load "$port")
    PIDS+=("$pid")
    wait_ready apply-load "$pid" "$port"
    runs="$WORK/apply-load.txt"
    : >"$runs"
    reset_peak_rss "$pid"
    per_run=$((DURATION * 2000))
    for i in $(seq "$RUNS"); do
      quiet "select → apply/$i"
      # Each run's records are created before its clock starts; 2,000 per second of run is
      # more than the path takes here.
      out=$("$APPLY_LOAD_BIN" --server "http://127.0.0.1:$port" \
        --service "http://127.0.0.1:$APPLY_SERVICE_PORT" --duration "$DURATION" \
        --concurrency "$CONNECTIONS" --records "$per_run" --first-record $(( (i - 1) * per_run )) \
        --cpu-pid "$pid") || { log "apply_load failed:"; echo "$out" >&2; exit 1; }
      grep '^apply_load ' <<<"$out" >>"$runs"
      log "$(grep '^apply_load pair' <<<"$out")"
    done
    rss=$(peak_rss_mib "$pid")
    python3 - "$runs" "$rss" >>"$RESULTS" <<'EOF'
import statistics, sys
pairs = [dict(kv.split("=") for kv in l.split()[2:]) for l in open(sys.argv[1]) if l.startswith("apply_load pair ")]
med = lambda k: statistics.median(float(p[k]) for p in pairs)
print("\t".join(["select → apply (new change each)", "actiongate select → apply", "%.1f" % med("per_s"),
                 "%d" % (med("p50_ms") * 1000), "%d" % (med("p99_ms") * 1000), sys.argv[2], "0",
                 "%.0f" % med("cpu_us")]))
EOF
    log "$(tail -1 "$RESULTS")"
    cleanup
  else
    log "skipping the apply path: $ACTIONGATE_BIN serve has no --embedded-service-port"
  fi
fi

# --- the table -----------------------------------------------------------------------------

mkdir -p "$(dirname "$OUT")"
python3 - "$RESULTS" "$OUT" "$DURATION" "$RUNS" "$WARMUP" "$THREADS" "$CONNECTIONS" "$SDK_WORKERS" "$NOISY" "$PARSE" <<'EOF'
import datetime, os, platform, subprocess, sys
results, out, duration, runs, warmup, threads, conns, sdk_workers, noisy, parse = sys.argv[1:]
rows = [l.rstrip("\n").split("\t") for l in open(results) if l.strip()]
by = {(r[0], r[1]): r for r in rows}

def ms(us):
    return "%.2f" % (int(us) / 1000)

lines = [
    "| size | server | req/s | p50 ms | p99 ms | peak RSS MiB | × rasa-sdk | of ceiling | server CPU µs/req |",
    "|---|---|---:|---:|---:|---:|---:|---:|---:|",
]
for size, server, rps, p50, p99, rss, errors, cpu_us in rows:
    rps_f = float(rps)
    grpc = server.endswith(" --grpc")
    base = by.get((size, "rasa-sdk --grpc" if grpc else "rasa-sdk"))
    ceil = None if grpc else by.get((size, "ceiling"))
    ratio = "%.1f×" % (rps_f / float(base[2])) if base and float(base[2]) > 0 else "–"
    frac = "%.0f %%" % (100 * rps_f / float(ceil[2])) if ceil and float(ceil[2]) > 0 else "–"
    name = server + (" (%s errors)" % errors if errors != "0" else "")
    lines.append("| %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
        size, name, "{:,.0f}".format(rps_f), ms(p50), ms(p99), rss, ratio, frac,
        "{:,}".format(int(cpu_us))))
table = "\n".join(lines)

# Where actiongate's CPU goes: transport (what the ceiling spends per request on the same
# body), parsing the request (timed alone, one thread), and the rest (middleware, action,
# answer, allocator, scheduling). "JSON check alone": serde_json checking the body is JSON
# and nothing more, the floor for any parser that refuses malformed bodies.
breakdown = ""
parses = [l.rstrip("\n").split("\t") for l in open(parse) if l.strip()]
if parses:
    b = [
        "| size | actiongate CPU µs/req | transport (ceiling) µs/req | parse alone µs | of which JSON check alone µs | parse share | rest µs |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for size, parse_us, check_us in parses:
        ag, ce = by.get((size, "actiongate")), by.get((size, "ceiling"))
        if not ag:
            continue
        total = float(ag[7])
        transport = float(ce[7]) if ce else 0.0
        p = float(parse_us)
        b.append("| %s | %s | %s | %s | %s | %s | %s |" % (
            size, "{:,.0f}".format(total), "{:,.0f}".format(transport) if ce else "–",
            "{:,.1f}".format(p), "{:,.1f}".format(float(check_us)) if check_us else "–",
            "%.0f %%" % (100 * p / total) if total else "–",
            "{:,.0f}".format(total - transport - p) if ce else "–"))
    breakdown = "\n".join(b)

# The targets of the performance issue, checked against this run: requests/s at least
# `rps`× rasa-sdk's, p99 at most `p99` of rasa-sdk's, peak RSS at most half of rasa-sdk's
# worker's, and requests/s at least half of the ceiling's.
TARGETS = {"10": (10, 1 / 3), "1000": (30, 1 / 10), "10000": (15, 1 / 10)}
verdict = ""
v = [
    "| size | req/s × rasa-sdk (target) | p99 ÷ rasa-sdk's (target) | RSS ÷ rasa-sdk's (≤ 0.50) | of ceiling (≥ 50 %) |",
    "|---|---:|---:|---:|---:|",
]
def mark(ok):
    return "✓" if ok else "✗"
for size in dict.fromkeys(r[0] for r in rows):
    n = size.split(" ")[0]
    ag, sdk, ce = by.get((size, "actiongate")), by.get((size, "rasa-sdk")), by.get((size, "ceiling"))
    if n not in TARGETS or not ag or not sdk or float(sdk[2]) <= 0:
        continue
    want_rps, want_p99 = TARGETS[n]
    rps = float(ag[2]) / float(sdk[2])
    p99 = int(ag[4]) / max(int(sdk[4]), 1)
    rss = float(ag[5]) / max(float(sdk[5]), 0.1)
    frac = float(ag[2]) / float(ce[2]) if ce and float(ce[2]) > 0 else None
    v.append("| %s | %.1f× (≥ %d×) %s | %.2f (≤ %.2f) %s | %.2f %s | %s |" % (
        size, rps, want_rps, mark(rps >= want_rps), p99, want_p99, mark(p99 <= want_p99),
        rss, mark(rss <= 0.5),
        "%.0f %% %s" % (100 * frac, mark(frac >= 0.5)) if frac is not None else "–"))
if len(v) > 2:
    verdict = "\n".join(v)

def cmd(*a):
    try:
        return subprocess.run(a, capture_output=True, text=True).stdout.strip()
    except OSError:
        return "?"

cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
header = f"""# actiongate benchmark: count_events vs rasa-sdk {os.environ.get('SDK_VERSION', '3.21.1')} vs the transport ceiling

{datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}, {os.cpu_count()} cores ({cpu}), {platform.system()} {platform.release()}.
Load: `wrk -t{threads} -c{conns} -d{duration}s --latency` on the same machine (loopback), {warmup} s warm-up,
median of {runs} run(s) per cell. rasa-sdk: {sdk_workers} Sanic worker(s), Python {cmd(os.path.join(os.environ.get('VENV', '.venv-bench'), 'bin', 'python'), '-c', 'import platform; print(platform.python_version())')};
actiongate and the ceiling: one worker thread per core. wrk runs on the same 2 cores; servers and
wrk at {os.environ.get('NICE_NOTE', 'nice 0')}.

- `ceiling`: a bare actix-web server that reads the body and answers a constant (no parsing).
- `--grpc`: the same action over Rasa Pro's gRPC ActionService (`Webhook`), rasa-sdk started
  with `--grpc` and actiongate's SDK with its ActionService, driven by
  crates/tools/examples/grpc_load.rs ({conns} HTTP/2 connections, closed loop, gzip both ways as
  Rasa Pro's channel has it, the same body converted once); `× rasa-sdk` is against
  rasa-sdk --grpc.
- `× rasa-sdk`, `of ceiling`: ratios of req/s.
- Peak RSS: VmHWM of the serving process (rasa-sdk: its worker) during the timed runs.
- Server CPU µs/req: user+system time of the serving process(es) during the timed runs,
  divided by the requests answered.
- `apply (replayed)`: `actiongate serve` with the embedded service; the same confirmed
  apply_subscription_change posted again and again, answered from the store.
- `select → apply`: `actiongate serve` with the embedded service, every iteration a new
  change (select, the question, "yes", apply: every check, the command, the store, the
  audit trail) for {conns} customers at once in a closed loop (crates/tools/examples/apply_load.rs);
  req/s is changes per second, the latencies are of the pair, CPU is per change.

Produced by `bench/run.sh`.
"""
text = header + "\n" + table + "\n"
if verdict:
    text += "\nAgainst the targets:\n\n" + verdict + "\n"
if breakdown:
    text += "\nWhere actiongate's CPU per request goes (rest = middleware, action, answer, allocator, scheduling):\n\n" + breakdown + "\n"
noise = [l.strip() for l in open(noisy) if l.strip()]
if noise:
    text += "\nOther work was running when these cells started (their numbers are low):\n" + "".join("- %s\n" % l for l in noise)
with open(out, "w") as f:
    f.write(text)
print(table)
if verdict:
    print()
    print(verdict)
if breakdown:
    print()
    print(breakdown)
for l in noise:
    print("note: busy machine at the start of " + l)
EOF
log "table written to $OUT"
