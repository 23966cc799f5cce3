#!/usr/bin/env bash
# The operator console in a real browser: Debian's headless Chromium driven by Selenium
# through Debian's chromedriver (tests/browser/console.py).
#
#   bash scripts/console-browser.sh [--screenshots DIR]
#
# 1. installs chromium and chromium-driver from Debian's packages when missing;
# 2. makes a venv (.venv-browser; BROWSER_VENV overrides it) from tests/browser/requirements.txt;
# 3. builds actiongate and the confirm_change tool;
# 4. starts actiongate serve with the embedded service and the console (an operator whose
#    argon2 hash `actiongate hash-password` makes), and a second one whose sessions last 3 s;
# 5. makes two held changes through the webhook (the demo data's Wine Club cancellation,
#    which the service marks for review), as Rasa records the conversation;
# 6. runs the browser suite: sign-in, wrong password, the held change, a forged form, a
#    form from another origin, approval (one change at the service), a hold whose terms
#    moved, the timeline, a phone's width, sign-out, an expired session.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
SHOTS=""
APPROVE=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --screenshots) SHOTS="$2"; shift 2 ;;
    # scripts/rasa-e2e.sh: approve the one held change on a running console, check the
    # service and Rasa's tracker (CONSOLE_URL SERVICE_URL RASA_URL); nothing is started.
    --approve-held) APPROVE=("$2" "$3" "$4"); shift 4 ;;
    *) echo "usage: $0 [--screenshots DIR] | --approve-held CONSOLE SERVICE RASA" >&2; exit 2 ;;
  esac
done
log() { printf '[browser] %s\n' "$*" >&2; }
if ! command -v chromium >/dev/null || ! command -v chromedriver >/dev/null; then
  log "installing chromium and chromium-driver"
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y chromium chromium-driver >/dev/null 2>&1 || { apt-get update >/dev/null && apt-get install -y chromium chromium-driver >/dev/null; }
fi
VENV="${BROWSER_VENV:-$ROOT/.venv-browser}"
REQUIREMENTS="$ROOT/tests/browser/requirements.txt"
if ! cmp -s "$REQUIREMENTS" "$VENV/.requirements" 2>/dev/null; then
  log "making $VENV"
  [[ -x "$VENV/bin/python" ]] || python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q -r "$REQUIREMENTS"
  cp "$REQUIREMENTS" "$VENV/.requirements"
fi
if [[ ${#APPROVE[@]} -gt 0 ]]; then
  exec "$VENV/bin/python" tests/browser/console.py --approve-held --console "${APPROVE[0]}" \
    --service "${APPROVE[1]}" --rasa "${APPROVE[2]}"
fi
cargo build --quiet --bin actiongate
cargo build --quiet -p tools --example confirm_change
BIN="$ROOT/target/debug/actiongate"
WORK=$(mktemp -d /tmp/actiongate-browser.XXXXXX)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$WORK"; }
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
HASH=$(printf 'correct horse battery\n' | "$BIN" hash-password)
endpoints() { # SESSION_MINUTES
  cat <<EOF
actiongate:
  # Two holds on the Wine Club at once: the second is approved after the first moved the
  # record (one open hold a subscription is the default).
  approval: {max_open_per_subscription: 2}
  console:
    session_minutes: $1
    operators:
      - name: ana
        password_hash: "$HASH"
EOF
}
endpoints 480 >"$WORK/endpoints.yml"
endpoints 0.05 >"$WORK/short.yml"
start() { # NAME ENDPOINTS RASA_PORT SERVICE_PORT ADMIN_PORT
  "$BIN" serve --host 127.0.0.1 --port "$3" --embedded-service-port "$4" --admin-port "$5" \
    --endpoints "$WORK/$2" --data-dir "$WORK/$1" --quiet 2>"$WORK/$1.log" &
  PIDS+=($!)
  for _ in $(seq 100); do curl -sf "http://127.0.0.1:$3/health" >/dev/null 2>&1 && return 0; sleep 0.1; done
  log "$1 did not start:"; cat "$WORK/$1.log" >&2; exit 1
}
RP=$(free_port); SP=$(free_port); AP=$(free_port)
start main endpoints.yml "$RP" "$SP" "$AP"
RP2=$(free_port); SP2=$(free_port); AP2=$(free_port)
start short short.yml "$RP2" "$SP2" "$AP2"
for sender in browser-1 browser-2; do
  out=$(target/debug/examples/confirm_change --server "http://127.0.0.1:$RP" --sender "$sender" \
    --account acct-21 --subscription WS-SUB-7001 --change cancel_now)
  grep -q '"status":"held"' <<<"$out" || { log "no held change: $out"; exit 1; }
  sleep 0.05
done
[[ -n "$SHOTS" ]] && mkdir -p "$SHOTS"
"$VENV/bin/python" tests/browser/console.py --console "http://127.0.0.1:$AP" --short "http://127.0.0.1:$AP2" \
  --service "http://127.0.0.1:$SP" ${SHOTS:+--screenshots "$SHOTS"}
