#!/usr/bin/env bash
# The real actions, side by side: the seed's sample as rasa-sdk 3.21.1 actions
# (bench/seed_actions: select and apply, aiohttp to the service) against `actiongate
# serve`, both calling one `actiongate subscription-service` process, with the same bodies
# (bench/make_bodies.py --real: select at 10 / 1,000 / 10,000 events, and the confirmed
# "yes" delivered again, so each takes its repeat path), then the same conversations with
# Rasa Pro's full parse_data on every customer turn (--pro), `wrk -t2 -c16`, and the CPU
# time of each server process per request read from /proc. Issue 17's table, in one command.
#
# Then, for actiongate alone: the new-change path (select, the question, "yes", apply, on
# a fresh record each time, 16 customers at once: crates/tools/examples/apply_load.rs) with
# CPU per change; the service's own GET of a record, with its CPU per request; and each
# server's peak RSS (VmHWM) over the whole run, the 10,000-event bodies included.
#
# Usage: bench/real_actions.sh [--duration SECONDS] [--sizes 10,1000,10000] [--no-build]
#                              [--out FILE]
# ACTIONGATE_BIN and APPLY_LOAD_BIN measure other builds (an earlier commit's, say).
# Needs: python3 (3.11), cargo, wrk, curl. The venv (.venv-real; REAL_VENV overrides it) is
# made from the pinned list bench/seed_actions/requirements.txt when missing or different.
# Everything listens on 127.0.0.1 and is stopped on exit.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
DURATION=10
SIZES="10,1000,10000"
BUILD=1
OUT="bench/results/real-actions.md"
VENV="${REAL_VENV:-$ROOT/.venv-real}"
# shellcheck source=bench/lib.sh
source "$ROOT/bench/lib.sh"
bench_args "$@"
bench_workdir real
need_wrk
seed_venv
if [[ "$BUILD" == 1 ]]; then
  cargo build --release --quiet --bin actiongate
  cargo build --release --quiet -p tools --example apply_load
fi
BIN="${ACTIONGATE_BIN:-$ROOT/target/release/actiongate}"
APPLY_LOAD="${APPLY_LOAD_BIN:-$ROOT/target/release/examples/apply_load}"
python3 bench/make_bodies.py "$WORK" --sizes "$SIZES" --real --pro >/dev/null

SP=$(free_port); AP=$(free_port); PP=$(free_port)
setsid "$BIN" subscription-service --port "$SP" --data-dir "$WORK/service" >"$WORK/service.log" 2>&1 &
PIDS+=($!); SERVICE_PID=$!
wait_http "http://127.0.0.1:$SP/v1/subscriptions/WS-SUB-3304"
(cd "$WORK" && exec setsid "$BIN" serve --host 127.0.0.1 --port "$AP" --subscriptions-url "http://127.0.0.1:$SP" \
  --data-dir "$WORK/actiongate" --rate-capacity 1000000) >"$WORK/actiongate.log" 2>&1 &
PIDS+=($!); AG_PID=$!
(cd bench && SUBSCRIPTIONS_URL="http://127.0.0.1:$SP" PYTHONDONTWRITEBYTECODE=1 \
  exec setsid "$VENV/bin/python" -m rasa_sdk --actions seed_actions -p "$PP") >"$WORK/python.log" 2>&1 &
PIDS+=($!); PY_PID=$!
wait_http "http://127.0.0.1:$AP/health"; wait_http "http://127.0.0.1:$PP/health"

RESULTS="$WORK/results.tsv"; : >"$RESULTS"
IFS=, read -r -a SIZE_LIST <<<"$SIZES"
# Select first, while the records still offer the change; then apply: each server's first
# apply (the check) makes the change on its record, after which it takes its repeat path
# (actiongate: the store's recorded outcome; the sample: the record read again and
# compared, and refused as moved on).
for n in "${SIZE_LIST[@]}"; do
  for server in python actiongate; do
    for shape in "" pro-; do REVISION[RA-$server-$shape$n]=$(put_record "$SP" "RA-$server-$shape$n"); done
  done
done
# The bench's own bodies, then the same conversations with Rasa Pro's full parse_data on
# every customer turn (bench/make_bodies.py --pro).
for shape in "" pro-; do
  for action in select apply; do
    for n in "${SIZE_LIST[@]}"; do
      for server in actiongate python; do
        port=$AP; [[ $server == python ]] && port=$PP
        check_answer "$server" "http://127.0.0.1:$port" "$(body_for "$action-$shape$n" "RA-$server-$shape$n")"
      done
      measure "$action$shape" "$n" python "http://127.0.0.1:$PP" "$PY_PID" "$(body_for "$action-$shape$n" "RA-python-$shape$n")"
      measure "$action$shape" "$n" actiongate "http://127.0.0.1:$AP" "$AG_PID" "$(body_for "$action-$shape$n" "RA-actiongate-$shape$n")"
    done
  done
done

# The new-change path, actiongate alone (the sample has no store to keep a change once).
NEW=$("$APPLY_LOAD" --server "http://127.0.0.1:$AP" --service "http://127.0.0.1:$SP" --duration "$DURATION" \
  --concurrency 16 --records 40000 --first-record 700000 --cpu-pid "$AG_PID" | grep '^apply_load pair ')
log "new changes: $NEW"
# The service's GET of a record, alone.
s0=$(group_ticks "$SERVICE_PID")
GET=$(wrk -t2 -c16 -d"${DURATION}s" --latency "http://127.0.0.1:$SP/v1/subscriptions/WS-SUB-3304" 2>&1)
s1=$(group_ticks "$SERVICE_PID")
GET_RPS=$(awk '/^Requests\/sec/ {print $2}' <<<"$GET")
GET_N=$(awk '/requests in/ {print $1}' <<<"$GET")
GET_CPU=$(python3 -c "import sys; print('%.0f' % ((int(sys.argv[1]) / int(sys.argv[2])) * 1e6 / max(1, int(sys.argv[3]))))" "$((s1 - s0))" "$(getconf CLK_TCK)" "$GET_N")
log "service GET: $GET_RPS req/s, $GET_CPU µs/req"
AG_HWM=$(hwm "$AG_PID"); PY_HWM=$(hwm "$PY_PID")

mkdir -p "$(dirname "$OUT")"
python3 - "$RESULTS" "$OUT" "$DURATION" "$NEW" "$GET_RPS" "$GET_CPU" "$AG_HWM" "$PY_HWM" <<'PY'
import sys
new = dict(kv.split("=") for kv in sys.argv[4].split()[2:])
get_rps, get_cpu, ag_hwm, py_hwm = sys.argv[5], sys.argv[6], int(sys.argv[7]), int(sys.argv[8])
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if l.strip()]
by = {(r[0], r[1], r[2]): r for r in rows}
lines = ["| action | events | Python req/s | actiongate req/s | Python p99 ms | actiongate p99 ms | Python CPU µs/req | actiongate CPU µs/req | CPU less by | req/s more by |",
         "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
LABELS = {"select": "select", "apply": "apply (repeat)",
          "selectpro-": "select, Rasa Pro parse_data", "applypro-": "apply (repeat), Rasa Pro parse_data"}
for action in LABELS:
    for size in dict.fromkeys(r[1] for r in rows):
        py, ag = by.get((action, size, "python")), by.get((action, size, "actiongate"))
        if not py or not ag:
            continue
        label = LABELS[action]
        lines.append("| %s | %s | %s | %s | %s | %s | %s | %s | %.1f× | %.1f× |" % (
            label, "{:,}".format(int(size)), "{:,}".format(int(py[3])), "{:,}".format(int(ag[3])), py[4], ag[4],
            "{:,}".format(int(py[5])), "{:,}".format(int(ag[5])),
            float(py[5]) / max(1.0, float(ag[5])), float(ag[3]) / max(1.0, float(py[3]))))
table = "\n".join(lines)
extra = ("\n\n| actiongate alone | per s | p99 ms | CPU µs each |\n|---|---:|---:|---:|\n"
         "| select → question → yes → apply, a new change each (16 customers) | %s changes | %s | %s |\n"
         "| the service's GET of a record (`wrk -t2 -c16`) | %s | – | %s |\n\n"
         "Peak RSS over the whole run (VmHWM): actiongate %.1f MiB, the Python sample %.1f MiB (its largest process).\n") % (
    "{:,}".format(int(float(new["per_s"]))), new["p99_ms"], "{:,}".format(int(float(new["cpu_us"]))),
    "{:,}".format(int(float(get_rps))), get_cpu, ag_hwm / 1024, py_hwm / 1024)
text = ("# The real actions: the seed's sample (rasa-sdk 3.21.1) against actiongate serve\n\n"
        "Produced by `bash bench/real_actions.sh`: one `actiongate subscription-service` for both, "
        "`wrk -t2 -c16 -d%ss` after a 2 s warm-up, CPU of each server process per request from /proc.\n\n" % sys.argv[3]
        + table + extra)
open(sys.argv[2], "w").write(text)
print(table + extra)
PY
log "table written to $OUT"
