#!/usr/bin/env bash
# Calls made the way Rasa makes them: Rasa 3.6's HTTP executor opens a new client session
# for each action call, so every call pays a TCP connect, and with TLS a full handshake
# (a new session has no ticket to resume with). select and the repeated apply at 10 events
# (bench/make_bodies.py --real), each call on a new connection and every TLS handshake a
# full one (crates/tools/examples/connect_load.rs; wrk resumes TLS sessions), plain and with TLS, the seed's sample (rasa-sdk 3.21.1, bench/seed_actions)
# beside `actiongate serve`, and the ceiling: with TLS crates/tools/examples/tls_ceiling.rs (a
# bare rustls server that answers after the handshake) with the same certificate, plain
# crates/actionserver/examples/ceiling.rs (a bare actix-web server answering a constant); and
# beside them, with TLS, that bare actix-web server over TLS on actiongate's settings, so
# what actix-web's TLS path costs is read apart from what actiongate's work does. TLS
# with an ECDSA P-256 certificate and with RSA-2048, to show what the certificate costs.
# CPU per call of each server's processes, from /proc.
#
# Usage: bench/connections.sh [--duration SECONDS] [--no-build] [--out FILE] [--workers N]
# --workers N: actiongate (`serve --workers N`) and the ceilings on N threads; by default
# one per core for actiongate and the actix-web ceilings, two for the TLS ceiling. The seed's
# sample serves on one thread either way (rasa-sdk's single process).
# Needs: python3 (3.11), cargo, wrk, curl, openssl. The venv is bench/real_actions.sh's.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
DURATION=8
BUILD=1
OUT="bench/results/connections.md"
VENV="${REAL_VENV:-$ROOT/.venv-real}"
# shellcheck source=bench/lib.sh
source "$ROOT/bench/lib.sh"
bench_args "$@"
bench_workdir connections
need_wrk
seed_venv
connection_bins
CEILING="$ROOT/target/release/examples/tls_ceiling"
PLAIN_CEILING="$ROOT/target/release/examples/ceiling"
LOAD="$ROOT/target/release/examples/connect_load"
python3 bench/make_bodies.py "$WORK" --sizes 10 --real >/dev/null

# A leaf of each kind, to show what the certificate costs.
bench_ca
leaf ecdsa ec -pkeyopt ec_paramgen_curve:P-256
leaf rsa rsa:2048

SP=$(free_port)
setsid "$BIN" subscription-service --port "$SP" --data-dir "$WORK/service" >"$WORK/service.log" 2>&1 &
PIDS+=($!)
wait_http "http://127.0.0.1:$SP/v1/subscriptions/WS-SUB-3304"

declare -A URL PID
# start_actiongate NAME [TLS CERT]: one `actiongate serve` on a port of its own.
start_actiongate() {
  local name="$1" port tls=() scheme=http
  port=$(free_port)
  if [[ $# -gt 1 ]]; then tls=(--ssl-certificate "$WORK/$2.pem" --ssl-keyfile "$WORK/$2.key"); scheme=https; fi
  (cd "$WORK" && exec setsid "$BIN" serve --host 127.0.0.1 --port "$port" --subscriptions-url "http://127.0.0.1:$SP" \
    --data-dir "$WORK/ag-$name" --rate-capacity 1000000 ${WORKERS:+--workers "$WORKERS"} "${tls[@]}") >"$WORK/ag-$name.log" 2>&1 &
  PIDS+=($!); PID[actiongate-$name]=$!; URL[actiongate-$name]="$scheme://127.0.0.1:$port"
}
# start_python NAME [CERT]: the seed's sample under rasa-sdk, on a port of its own.
start_python() {
  local name="$1" port tls=() scheme=http
  port=$(free_port)
  if [[ $# -gt 1 ]]; then tls=(--ssl-certificate "$WORK/$2.pem" --ssl-keyfile "$WORK/$2.key"); scheme=https; fi
  (cd bench && SUBSCRIPTIONS_URL="http://127.0.0.1:$SP" PYTHONDONTWRITEBYTECODE=1 \
    exec setsid "$VENV/bin/python" -m rasa_sdk --actions seed_actions -p "$port" "${tls[@]}") >"$WORK/py-$name.log" 2>&1 &
  PIDS+=($!); PID[python-$name]=$!; URL[python-$name]="$scheme://127.0.0.1:$port"
}
start_ceiling() { # CERT
  local port
  port=$(free_port)
  setsid "$CEILING" --port "$port" --certificate "$WORK/$1.pem" --key "$WORK/$1.key" ${WORKERS:+--threads "$WORKERS"} \
    >"$WORK/ceiling-$1.log" 2>&1 &
  PIDS+=($!); PID[ceiling-$1]=$!; URL[ceiling-$1]="https://127.0.0.1:$port"
}
# The plain ceiling: a bare actix-web server that reads the body and answers a constant
# (crates/actionserver/examples/ceiling.rs), what a new plain connection costs with nothing
# behind it.
start_actix_ceiling() { # CERT: the bare actix-web server over TLS, on actiongate's settings
  local port
  port=$(free_port)
  setsid "$PLAIN_CEILING" "$port" "${WORKERS:-$(nproc)}" "$WORK/$1.pem" "$WORK/$1.key" >"$WORK/actix-$1.log" 2>&1 &
  PIDS+=($!); PID[actix-$1]=$!; URL[actix-$1]="https://127.0.0.1:$port"
}
start_plain_ceiling() {
  local port
  port=$(free_port)
  setsid "$PLAIN_CEILING" "$port" ${WORKERS:+"$WORKERS"} >"$WORK/ceiling-plain.log" 2>&1 &
  PIDS+=($!); PID[ceiling-plain]=$!; URL[ceiling-plain]="http://127.0.0.1:$port"
}
TRANSPORTS=(plain ecdsa rsa)
start_actiongate plain; start_python plain; start_plain_ceiling
for cert in ecdsa rsa; do
  start_actiongate "$cert" "$cert"; start_python "$cert" "$cert"; start_ceiling "$cert"; start_actix_ceiling "$cert"
done
for key in "${!URL[@]}"; do
  case "$key" in ceiling-*|actix-*) sleep 0.5 ;; *) wait_http "${URL[$key]}/health" ;; esac
done

RESULTS="$WORK/results.tsv"; : >"$RESULTS"
# A row with a new connection per call: a 2 s warm-up, then the timed run.
measure_new() { # ACTION TRANSPORT NAME BODY
  local url="${URL[$3-$2]}" ca=()
  [[ $2 != plain ]] && ca=(--ca "$WORK/ca.pem")
  "$LOAD" --url "$url" --body "$4" "${ca[@]}" --duration 2 >/dev/null 2>&1
  record_run "$1" "$2" "$3" "${PID[$3-$2]}" "$LOAD" --url "$url" --body "$4" "${ca[@]}" --duration "$DURATION"
}
for transport in "${TRANSPORTS[@]}"; do
  for server in python actiongate; do
    id="RA-$server-$transport"
    REVISION[$id]=$(put_record "$SP" "$id")
  done
done
# Select first, while the records offer the change; then apply (the first apply, the
# check, makes it, and every later one is a repeat).
for action in select apply; do
  for transport in "${TRANSPORTS[@]}"; do
    for server in actiongate python; do
      check_answer "$server-$transport" "${URL[$server-$transport]}" "$(body_for "$action-10" "RA-$server-$transport")"
    done
    for server in python actiongate; do
      measure_new "$action" "$transport" "$server" "$(body_for "$action-10" "RA-$server-$transport")"
    done
    measure_new "$action" "$transport" ceiling "$(body_for "$action-10" "RA-actiongate-$transport")"
    if [[ $transport != plain ]]; then
      measure_new "$action" "$transport" actix "$(body_for "$action-10" "RA-actiongate-$transport")"
    fi
  done
done
# And with keep-alive, actiongate on TLS: the handshake's share, by difference.
for transport in ecdsa rsa; do
  measure "apply-keepalive" "$transport" actiongate "${URL[actiongate-$transport]}" "${PID[actiongate-$transport]}" \
    "$(body_for "apply-10" "RA-actiongate-$transport")"
done

mkdir -p "$(dirname "$OUT")"
if [[ -n "$WORKERS" ]]; then
  THREADS="actiongate and the ceilings on $WORKERS worker thread(s) (\`--workers $WORKERS\`)"
else
  THREADS="actiongate and the actix-web ceilings on one worker thread per core (the default), the TLS ceiling on two"
fi
python3 - "$RESULTS" "$OUT" "$DURATION" "$(openssl version)" "$THREADS" "${WORKERS:+ --workers $WORKERS}" <<'PY'
import sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if l.strip()]
by = {(r[0], r[1], r[2]): r for r in rows}
names = {"plain": "plain HTTP", "ecdsa": "TLS, ECDSA P-256", "rsa": "TLS, RSA-2048"}
lines = ["| action (10 events) | connection | Python req/s | actiongate req/s | Python CPU µs/call | actiongate CPU µs/call | ceiling CPU µs/call | CPU less than Python by | actiongate ÷ ceiling | actix-web ceiling CPU µs/call | actiongate ÷ it |",
         "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
for action, label in (("select", "select"), ("apply", "apply (repeat)")):
    for transport in ("plain", "ecdsa", "rsa"):
        py, ag, ce = (by.get((action, transport, n)) for n in ("python", "actiongate", "ceiling"))
        # Plain, the ceiling is the bare actix-web server already.
        ax = ce if transport == "plain" else by.get((action, transport, "actix"))
        if not py or not ag:
            continue
        ratio = float(py[5]) / max(1.0, float(ag[5]))
        over = lambda c: "%.2f×" % (float(ag[5]) / max(1.0, float(c[5]))) if c else "–"
        lines.append("| %s | new per call, %s | %s | %s | %s | %s | %s | %.1f× | %s | %s | %s |" % (
            label, names[transport], "{:,}".format(int(py[3])), "{:,}".format(int(ag[3])),
            py[5], ag[5], ce[5] if ce else "–", ratio, over(ce), ax[5] if ax else "–", over(ax)))
keep = ["", "| actiongate, apply (repeat) on one kept TLS connection | req/s | CPU µs/call |", "|---|---:|---:|"]
for transport in ("ecdsa", "rsa"):
    r = by.get(("apply-keepalive", transport, "actiongate"))
    if r:
        keep.append("| %s | %s | %s |" % (names[transport], "{:,}".format(int(r[3])), r[5]))
failed = [r for r in rows if r[6] != "0"]
note = "" if not failed else "\n\nCalls that failed or were cut: " + ", ".join("%s %s %s: %s" % (r[0], r[1], r[2], r[6]) for r in failed)
text = ("# Calls made the way Rasa makes them: a new connection for each call\n\n"
        "Produced by `bash bench/connections.sh%s`: one `actiongate subscription-service` for all, "
        "16 callers for %ss after a 2 s warm-up, each call on a new connection with a full TLS handshake "
        "(`connect_load`: rustls, resumption off, HTTP/1.1, the server's chain checked, as a new aiohttp "
        "session; the kept connection: wrk, %s), CPU of each server's processes per call from /proc. "
        "The ceiling: with TLS, `tls_ceiling` (a bare rustls server that answers after the handshake, same certificate); "
        "plain, `ceiling` (a bare actix-web server that reads the body and answers a constant); "
        "the actix-web ceiling: that same bare actix-web server, over TLS on the TLS rows (actiongate's TLS settings, same certificate, its worker threads as actiongate's); "
        "%s; the seed's sample on one (rasa-sdk's single process).\n\n" % (sys.argv[6], sys.argv[3], sys.argv[4], sys.argv[5])
        + "\n".join(lines) + "\n" + "\n".join(keep) + note + "\n")
open(sys.argv[2], "w").write(text)
print(text)
PY
log "table written to $OUT"
