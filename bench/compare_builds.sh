#!/usr/bin/env bash
# Two builds of actiongate, alternated on the new-change load (the SQLite row of
# bench/new_changes.sh: one service, apply_load's select → question → "yes" → apply, a
# fresh record each time, 16 customers at once), so a step of a few per cent shows on
# cores whose pace moves by more than that from one minute to the next. Each run prints
# the server's CPU a change, split by its threads (the request's worker threads; the main
# runtime's, where the audit writer and the background tasks run; SQLite's checkpoint
# thread), the reference service's and the load's CPU beside it, and the server's CPU over
# the service's in the same run: the service does the same work in every run, so that
# ratio is read across the minutes where the CPU alone is not. A summary line per build
# gives the means. Writes the runs to bench/results/compare-builds.md (or --out).
#
# Usage: bench/compare_builds.sh BEFORE_BIN AFTER_BIN [--pairs N] [--workers N]
#        [--duration SECONDS] [--out FILE]
# BEFORE_BIN and AFTER_BIN are two `actiongate` binaries (a copy of the one built before a
# change, say, and the one after). --workers sets both servers' worker threads (default
# 1); --pairs the alternated pairs (default 4). The service and the load are this
# checkout's release builds (built unless --no-build). Needs: python3, cargo, curl.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
DURATION=8
SIZES=""
BUILD=1
OUT="bench/results/compare-builds.md"
PAIRS=4
[[ $# -ge 2 ]] || { sed -n '2,/^set -euo/p' "$0" | sed '$d' >&2; exit 2; }
BEFORE="$(realpath "$1")"
AFTER="$(realpath "$2")"
shift 2
REST=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --pairs) PAIRS="$2"; shift 2 ;;
    *) REST+=("$1"); shift ;;
  esac
done
# shellcheck source=bench/lib.sh
source "$ROOT/bench/lib.sh"
bench_args "${REST[@]}"
WORKERS="${WORKERS:-1}"
bench_workdir compare-builds
new_change_bins
start_service

# The CPU ticks of each kind of thread of process PID, one "kind ticks" line each.
threads() {
  local t comm stat
  for t in /proc/"$1"/task/*; do
    comm=$(cat "$t/comm" 2>/dev/null) || continue
    stat=$(cat "$t/stat" 2>/dev/null) || continue
    case "$comm" in
      "actix-server wo"*) comm=request ;;
      tokio-rt-worker) comm=runtime ;;
      sqlite-checkpoi*) comm=checkpoint ;;
      *) comm=other ;;
    esac
    # Past the command's closing parenthesis (a command may hold spaces): utime, stime.
    awk -v kind="$comm" '{ sub(/.*\) /, ""); print kind, $12 + $13 }' <<<"$stat"
  done | awk '{ t[$1] += $2 } END { for (k in t) print k, t[k] }' | sort
}

FIRST=4000000
TICK_US=$((1000000 / $(getconf CLK_TCK)))
printf '| run | build | changes/s | p99 ms | server CPU µs a change | request threads | main runtime | checkpoint thread | service CPU µs | load CPU µs | server ÷ service |\n' >"$WORK/table"
printf '|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n' >>"$WORK/table"
RUN=0
run() { # BIN LABEL
  local port pid line count
  port=$(free_port)
  setsid "$1" serve --host 127.0.0.1 --port "$port" --subscriptions-url "http://127.0.0.1:$SP" \
    --data-dir "$WORK/data-$FIRST" --rate-capacity 1000000 --workers "$WORKERS" >"$WORK/server.log" 2>&1 &
  PIDS+=($!); pid=$!
  wait_http "http://127.0.0.1:$port/health"
  "$APPLY_LOAD" --server "http://127.0.0.1:$port" --service "http://127.0.0.1:$SP" --duration 1 \
    --concurrency 16 --records 3000 --first-record "$FIRST" >/dev/null 2>&1
  threads "$pid" >"$WORK/before"
  line=$("$APPLY_LOAD" --server "http://127.0.0.1:$port" --service "http://127.0.0.1:$SP" \
    --duration "$DURATION" --concurrency 16 --records 30000 --first-record $((FIRST + 5000)) \
    --cpu-pid "$pid" --service-pid "$SERVICE_PID" | grep '^apply_load pair ')
  threads "$pid" >"$WORK/after"
  kill -- "-$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  FIRST=$((FIRST + 40000))
  RUN=$((RUN + 1))
  count=$(sed -E 's/.*count=([0-9]+).*/\1/' <<<"$line")
  join -a1 -a2 -e 0 -o 0,1.2,2.2 "$WORK/before" "$WORK/after" >"$WORK/parts"
  part() { awk -v k="$1" -v n="$count" -v us="$TICK_US" '$1 == k { printf "%d", ($3 - $2) * us / n; f = 1 } END { if (!f) printf "0" }' "$WORK/parts"; }
  awk -v run="$RUN" -v build="$2" -v req="$(part request)" -v rt="$(part runtime)" -v ck="$(part checkpoint)" '
    { for (i = 1; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] } }
    END {
      printf "| %d | %s | %s | %s | %s | %s | %s | %s | %s | %s | %.2f |\n", run, build, v["per_s"], v["p99_ms"],
        v["cpu_us"], req, rt, ck, v["service_cpu_us"], v["load_cpu_us"], v["cpu_us"] / v["service_cpu_us"]
    }' <<<"$line" | tee -a "$WORK/table"
}
log "$PAIRS alternated pairs, $WORKERS worker thread(s), ${DURATION}s a run: before $BEFORE, after $AFTER"
for _ in $(seq "$PAIRS"); do
  run "$BEFORE" before
  run "$AFTER" after
done
# Means per build: the server's CPU, each part, and the ratio.
awk -F'|' '$3 ~ /before|after/ {
    b = $3; gsub(/ /, "", b); n[b]++
    cpu[b] += $6; req[b] += $7; rt[b] += $8; ck[b] += $9; r[b] += $12
  }
  END {
    for (b in n) printf "%s: %d runs, mean server CPU %d µs a change (request threads %d, main runtime %d, checkpoint %d), mean server ÷ service %.3f\n",
      b, n[b], cpu[b] / n[b], req[b] / n[b], rt[b] / n[b], ck[b] / n[b], r[b] / n[b]
  }' "$WORK/table" | sort -r | tee "$WORK/means"
{
  echo "# Two builds alternated on the new-change load"
  echo
  echo "\`bash bench/compare_builds.sh\` ($(date -u +%Y-%m-%dT%H:%MZ)): $PAIRS alternated pairs of ${DURATION} s runs on the SQLite row of \`bench/new_changes.sh\`, $WORKERS worker thread(s), 16 customers. CPU in µs a change; the server's split by its threads. Before: \`$BEFORE\`, after: \`$AFTER\`."
  echo
  cat "$WORK/table"
  echo
  sed 's/^/- /' "$WORK/means"
} >"$OUT"
log "wrote $OUT"
