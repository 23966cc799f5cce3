#!/usr/bin/env bash
# What a call on a new connection is made of, counted where bench/connections.sh times it:
# select and the repeated apply at 10 events (bench/make_bodies.py --real), each call on a
# new connection (connect_load; with TLS a full ECDSA P-256 handshake each), on actiongate
# and on the two ceilings (the bare actix-web server of crates/actionserver/examples/ceiling.rs,
# plain and over TLS on actiongate's settings, and with TLS the bare rustls loop of
# crates/tools/examples/tls_ceiling.rs), every server on one worker thread. For each:
#   - instructions per call in user space (valgrind's callgrind, counted only while the
#     load runs; a server of its own, as the instructions bench of the new change does);
#   - system calls per call (`strace -c -f` attached while the load runs), and by name;
#   - CPU per call, user and system apart (/proc), in runs of their own before strace's.
# The two counts do not move with the machine's other work as CPU time does (by 2× between
# hours on these shared cores), so a share of the call can be read at any hour; they weigh
# every instruction and every system call alike, so they are read beside the CPU, not
# instead of it. Writes bench/results/connection-parts.md.
#
# Usage: bench/connection_parts.sh [--duration SECONDS] [--no-build] [--out FILE]
# KEEP=DIR keeps the callgrind and strace files there, to read with callgrind_annotate.
# ONLY=NAME measures that server alone (actiongate-plain, actix-ecdsa, ...).
# Needs valgrind and strace (Debian's, installed when missing), cargo, curl, openssl, python3.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
DURATION=6
SIZES=""
BUILD=1
OUT="bench/results/connection-parts.md"
# shellcheck source=bench/lib.sh
source "$ROOT/bench/lib.sh"
bench_args "$@"
bench_workdir connection-parts
for tool in valgrind strace; do
  command -v "$tool" >/dev/null || { apt-get update >/dev/null && apt-get install -y "$tool" >/dev/null; }
done
connection_bins
LOAD="$ROOT/target/release/examples/connect_load"
python3 bench/make_bodies.py "$WORK" --sizes 10 --real >/dev/null
bench_ca
leaf ecdsa ec -pkeyopt ec_paramgen_curve:P-256
start_service
RESULTS="$WORK/results.tsv"; : >"$RESULTS"

# The command line of server NAME (PORT and DATA replaced when it starts).
command_of() { # NAME
  local tls=(--ssl-certificate "$WORK/ecdsa.pem" --ssl-keyfile "$WORK/ecdsa.key")
  local serve=("$BIN" serve --host 127.0.0.1 --port PORT --subscriptions-url "http://127.0.0.1:$SP"
    --data-dir DATA --rate-capacity 1000000 --workers 1)
  case "$1" in
    actiongate-plain) echo "${serve[@]}" ;;
    actiongate-ecdsa) echo "${serve[@]}" "${tls[@]}" ;;
    actix-plain) echo "$ROOT/target/release/examples/ceiling PORT 1" ;;
    actix-ecdsa) echo "$ROOT/target/release/examples/ceiling PORT 1 $WORK/ecdsa.pem $WORK/ecdsa.key" ;;
    rustls-ecdsa) echo "$ROOT/target/release/examples/tls_ceiling --port PORT --certificate $WORK/ecdsa.pem --key $WORK/ecdsa.key --threads 1" ;;
  esac
}
# start NAME RUN [WRAPPER...]: the server on a free port, its data in $WORK/NAME-RUN; sets
# SERVER_PID and URL, and returns once it answers.
start() {
  local name="$1" run="$2" port words=() scheme=http
  shift 2
  port=$(free_port)
  for word in $(command_of "$name"); do
    word="${word/PORT/$port}"; words+=("${word/DATA/$WORK/$name-$run}")
  done
  [[ "$name" == *-ecdsa ]] && scheme=https
  (cd "$WORK" && exec setsid "$@" "${words[@]}") >"$WORK/$name-$run.log" 2>&1 &
  PIDS+=($!); SERVER_PID=$!; URL="$scheme://127.0.0.1:$port"
  if [[ "$name" == rustls-* ]]; then # it answers one request a connection and has no /health
    for _ in $(seq 600); do (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && return 0; sleep 0.2; done
    log "not ready: $name"; return 1
  fi
  for _ in $(seq 600); do curl -ksf -o /dev/null "$URL/health" && return 0; sleep 0.2; done
  log "not ready: $name"; return 1
}
stop() { kill -INT -- "-$SERVER_PID" 2>/dev/null || true; for _ in $(seq 100); do kill -0 "$SERVER_PID" 2>/dev/null || return 0; sleep 0.1; done; }
# load NAME BODY SECONDS: connect_load on $URL; prints the calls it made.
load() {
  local ca=()
  [[ "$1" == *-ecdsa ]] && ca=(--ca "$WORK/ca.pem")
  "$LOAD" --url "$URL" --body "$2" "${ca[@]}" --duration "$3" --concurrency 4 2>&1 | awk '/^RESULT/ {print $5; exit}'
}
user_system() { awk '{ sub(/.*\) /, ""); print $12, $13 }' "/proc/$1/stat"; }
row() { printf '%s\t%s\t%s\t%s\t%s\n' "$@" >>"$RESULTS"; }

SERVERS=(actiongate-plain actix-plain actiongate-ecdsa actix-ecdsa rustls-ecdsa)
[[ -n "${ONLY:-}" ]] && SERVERS=("$ONLY")
for name in "${SERVERS[@]}"; do
  # The CPU, then the system calls: one server, select's runs, then the repeated apply's
  # (its first apply, in the warm-up, makes the change).
  id="RP-$name"; REVISION[$id]=$(put_record "$SP" "$id")
  start "$name" cpu
  for action in select apply; do
    body=$(body_for "$action-10" "$id")
    load "$name" "$body" 1 >/dev/null
    read -r u0 s0 < <(user_system "$SERVER_PID")
    calls=$(load "$name" "$body" "$DURATION")
    read -r u1 s1 < <(user_system "$SERVER_PID")
    tick=$(getconf CLK_TCK)
    row "$name" "$action" cpu "$calls" "$(( (u1 - u0) * 1000000 / tick / calls )) $(( (s1 - s0) * 1000000 / tick / calls ))"
    strace -c -f -p "$SERVER_PID" -o "$WORK/strace-$name-$action.txt" 2>/dev/null &
    tracer=$!
    sleep 1
    calls=$(load "$name" "$body" "$DURATION")
    kill -INT "$tracer"; wait "$tracer" 2>/dev/null || true
    row "$name" "$action" syscalls "$calls" "$WORK/strace-$name-$action.txt"
  done
  stop
  # The instructions: a server under callgrind, counting only while a timed load runs.
  id="RC-$name"; REVISION[$id]=$(put_record "$SP" "$id")
  start "$name" callgrind valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file="$WORK/callgrind-$name.out"
  part=0
  for action in select apply; do
    body=$(body_for "$action-10" "$id")
    load "$name" "$body" 1 >/dev/null
    callgrind_control -z "$SERVER_PID" >/dev/null 2>&1
    callgrind_control -i on "$SERVER_PID" >/dev/null 2>&1
    calls=$(load "$name" "$body" "$DURATION")
    callgrind_control -i off "$SERVER_PID" >/dev/null 2>&1
    callgrind_control -d "$SERVER_PID" >/dev/null 2>&1
    part=$((part + 1))
    row "$name" "$action" instructions "$calls" "$WORK/callgrind-$name.out.$part"
  done
  stop
  log "$name: done"
done

if [[ -n "${KEEP:-}" ]]; then mkdir -p "$KEEP"; cp "$WORK"/callgrind-*.out.* "$WORK"/strace-*.txt "$KEEP"/; fi
mkdir -p "$(dirname "$OUT")"
python3 - "$RESULTS" "$OUT" "$DURATION" <<'PY'
import collections, re, subprocess, sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if l.strip()]
def instructions(path):
    out = subprocess.run(["callgrind_annotate", path], capture_output=True, text=True).stdout
    return int(re.search(r"([\d,]+) \(100.0%\)\s+PROGRAM TOTALS", out).group(1).replace(",", ""))
def syscalls(path):
    calls = collections.Counter()
    for line in open(path):
        f = line.split()
        if len(f) >= 5 and f[-1] != "total" and f[0][0].isdigit() and f[3].isdigit():
            calls[f[-1]] += int(f[3])
    return calls
table = collections.defaultdict(dict)
for name, action, kind, calls, value in rows:
    calls = max(1, int(calls))
    if kind == "cpu":
        user, system = map(int, value.split())
        table[name, action].update(user=user, system=system)
    elif kind == "syscalls":
        table[name, action]["syscalls"] = {k: v / calls for k, v in syscalls(value).items()}
    else:
        table[name, action].update(instructions=instructions(value) / calls, counted=calls)
names = {"actiongate-plain": ("actiongate", "plain"), "actix-plain": ("bare actix-web", "plain"),
         "actiongate-ecdsa": ("actiongate", "TLS, ECDSA"), "actix-ecdsa": ("bare actix-web", "TLS, ECDSA"),
         "rustls-ecdsa": ("bare rustls loop", "TLS, ECDSA")}
fmt = lambda n: "{:,}".format(round(n))
lines = ["| action | connection | server | instructions per call | ÷ the bare rustls loop | system calls per call | CPU user µs | CPU system µs |",
         "|---|---|---|---:|---:|---:|---:|---:|"]
for action in ("select", "apply"):
    base = table.get(("rustls-ecdsa", action), {}).get("instructions")
    for key, (server, conn) in names.items():
        r = table.get((key, action))
        if not r:
            continue
        over = "%.2f×" % (r["instructions"] / base) if base and conn != "plain" else "–"
        lines.append("| %s | %s | %s | %s | %s | %.1f | %d | %d |" % (
            "select" if action == "select" else "apply (repeat)", conn, server, fmt(r["instructions"]),
            over, sum(r["syscalls"].values()), r["user"], r["system"]))
# The system calls by name, per call, for each server's TLS select (and plain).
keys = [k for k in names if ("select" in [a for (n, a) in table if n == k])]
every = sorted({s for k in keys for s in table[k, "select"]["syscalls"]},
               key=lambda s: -max(table[k, "select"]["syscalls"].get(s, 0) for k in keys))
by = ["| system call (select, per call) | " + " | ".join("%s, %s" % names[k] for k in keys) + " |",
      "|---|" + "---:|" * len(keys)]
for s in every:
    values = [table[k, "select"]["syscalls"].get(s, 0) for k in keys]
    if max(values) >= 0.05:
        by.append("| `%s` | " % s + " | ".join("%.2f" % v for v in values) + " |")
text = ("# What a call on a new connection is made of: instructions, system calls and CPU\n\n"
        "Produced by `bash bench/connection_parts.sh`: select and the repeated apply at 10 events, each call "
        "on a new connection (`connect_load`, 4 callers, %s s a run; with TLS a full handshake on an ECDSA "
        "P-256 certificate), every server on one worker thread. Instructions: user space only, a server "
        "under callgrind of its own; system calls: `strace -c -f` attached while the load ran; CPU: the "
        "server's user and system time per call from /proc in a run of its own, which moves with the "
        "machine's hour where the two counts do not. The ceilings ignore the body, so their select and "
        "apply are the same call.\n\n" % sys.argv[3]
        + "\n".join(lines) + "\n\n" + "\n".join(by) + "\n")
open(sys.argv[2], "w").write(text)
print(text)
PY
log "table written to $OUT"
