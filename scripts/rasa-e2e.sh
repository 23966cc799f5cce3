#!/usr/bin/env bash
# A real Rasa 3.6.21 talks to actiongate, end to end.
#
#   bash scripts/rasa-e2e.sh [CONVERSATION.yml ...]   (default: tests/conversations/*.yml)
#
# 1. a Python 3.10 venv at .venv-rasa/ with assistant/requirements-lock.txt (reused when it
#    already has rasa 3.6.21);
# 2. trains the assistant in assistant/ once (a few seconds: keyword intents, regex
#    entities, rules only), and once the misrouted variant (below), when that set-up runs;
# 3. builds target/debug/actiongate;
#    then, against the first `rasa run` of the assistant, the NLU check: every reply in
#    tests/conversations/nlu/replies.yml goes through POST /model/parse, and the check
#    fails if a reply listed under not_affirm (a negation, a hedge, a question back) comes
#    back affirm, or one listed under affirm comes back anything else or below 0.8 (one
#    test in the totals; E2E_NLU=0 skips it);
# 4. runs every conversation file in three set-ups, each against a real `rasa run`:
#      plain       Rasa -> actiongate, plain JSON;
#      compressed  Rasa started with COMPRESS_ACTION_SERVER_REQUEST=true (deflate bodies);
#      token       actiongate started with --auth-token, Rasa's action_endpoint with
#                  `token:` (Rasa appends ?token=...);
#    a fifth, console: tests/conversations/held_for_approval.yml leaves a change held for
#                  approval; it is approved in the operator console in headless Chromium
#                  (scripts/console-browser.sh --approve-held); the service makes it once,
#                  and Rasa hears the decision (actiongate.approval.notify_rasa_url, Rasa's
#                  trigger_intent) and its rule runs check_subscription_change: `applied`;
#    a sixth, stripe: actiongate with `provider: stripe` against localstripe
#                  (scripts/localstripe.sh, seeded with Stripe's own Python client), and
#                  tests/conversations/stripe/stop_renewal.yml with the seed's ids written
#                  in: the terms from Stripe's price, the yes setting cancel_at_period_end
#                  in Stripe's record (read back through localstripe's API);
#    and the files of MISROUTED_FILES (below) in a fourth:
#      misrouted   plain, but Rasa runs tests/assistant-misrouted/: assistant/ with
#                  data/replies.yml replaced by rules that send every yes and every no to
#                  apply_subscription_change, wherever they come, and data/nlu.yml by the
#                  keyword order from before issue 22, which reads "No, don't do it",
#                  "I'm not sure", "Are you sure?" and the like as affirm. Those
#                  conversations check only what must hold whatever the routing and the
#                  reading do (nothing applied without a plain yes to the current
#                  question, the service's record as expected), so they pass only if
#                  actiongate alone refuses. The others need the correct routing and
#                  cannot pass there. A file joins by being listed in MISROUTED_FILES;
#                  when files are named on the command line, those of them in the list
#                  run here. (About 15 s more: one training, ~4 s, one `rasa run`, ~3 s,
#                  six files.)
#    Each file gets a freshly seeded actiongate (its own --data-dir), because the
#    conversations change the subscription records. `actiongate-dev converse` drives Rasa's
#    REST channel, checks Rasa's trackers and the service's records.
# 5. runs the Mantle forwarder's tests (tests/mantle, pytest in the same venv) against the
#    same binary (skipped when files are named on the command line, or E2E_MANTLE=0);
# 6. stops everything it started, and ends with `N passed, M failed` (conversations and
#    Mantle tests together); exits non-zero if any failed or any set-up could not run.
#
# Environment: RASA_VENV (venv path), E2E_SKIP_BUILD=1 (use the existing binary),
# E2E_ACTIONGATE (another actiongate binary; implies no build), E2E_NLU=0 (skip the NLU
# check),
# E2E_VARIANTS="plain compressed token misrouted console stripe" (which set-ups), E2E_KEEP=1 (keep the
# work dir with all logs).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

log() { printf '[rasa-e2e] %s\n' "$*" >&2; }

RASA_VERSION="3.6.21"
VENV="${RASA_VENV:-$ROOT/.venv-rasa}"
BIN="${E2E_ACTIONGATE:-$ROOT/target/debug/actiongate}"
# The conversation-test runner (`converse`), beside the server it tests.
DEV="${E2E_ACTIONGATE_DEV:-$(dirname "$BIN")/actiongate-dev}"
VARIANTS="${E2E_VARIANTS:-plain compressed token misrouted console stripe}"
TOKEN="secret"

# The conversations whose checks hold whatever the routing does, run against the
# misrouted variant too (see above).
MISROUTED_FILES=(
  tests/conversations/declined_and_denied.yml
  tests/conversations/no_then_ok_thanks.yml
  tests/conversations/no_asked_again_yes.yml
  tests/conversations/replies_not_a_yes.yml
  tests/conversations/reminder_before_the_yes.yml
  tests/conversations/button_click.yml
)

# The replies the trained assistant must (affirm) and must not (not_affirm) read as a yes.
NLU_REPLIES="tests/conversations/nlu/replies.yml"

if [ "$#" -gt 0 ]; then
  FILES=("$@")
else
  FILES=(tests/conversations/*.yml)
fi
for listed in "${MISROUTED_FILES[@]}"; do
  [ -f "$ROOT/$listed" ] || { log "MISROUTED_FILES names $listed, which does not exist"; exit 2; }
done
# The files of FILES that are in MISROUTED_FILES.
MISROUTED_RUN=()
for file in "${FILES[@]}"; do
  for listed in "${MISROUTED_FILES[@]}"; do
    if [ "$(realpath -m "$file")" = "$(realpath -m "$ROOT/$listed")" ]; then
      MISROUTED_RUN+=("$file")
    fi
  done
done

WORK="$(mktemp -d "${TMPDIR:-/tmp}/actiongate-e2e.XXXXXX")"
[ "${E2E_KEEP:-0}" = "1" ] && printf '[rasa-e2e] work dir (kept): %s\n' "$WORK" >&2
PIDS=()
FAILED_SETUP=0

stop_pid() {
  local pid="$1"
  if kill -0 "$pid" 2>/dev/null; then
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 50); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    kill -9 "$pid" 2>/dev/null || true
  fi
  wait "$pid" 2>/dev/null || true
}

cleanup() {
  local status=$?
  for pid in "${PIDS[@]:-}"; do
    [ -n "$pid" ] && stop_pid "$pid"
  done
  if [ "${E2E_KEEP:-0}" != "1" ]; then
    rm -rf "$WORK"
  fi
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

show_log() {
  local file="$1"
  if [ -f "$file" ]; then
    log "---- last lines of $(basename "$file") ----"
    tail -n 40 "$file" >&2 || true
  fi
}

# ---------------------------------------------------------------------------------------
# 1. The Rasa venv
# ---------------------------------------------------------------------------------------
find_python() {
  local candidate=""
  if command -v pyenv >/dev/null 2>&1; then
    candidate="$(pyenv root)/versions/3.10.13/bin/python3.10"
    if [ -x "$candidate" ]; then
      echo "$candidate"
      return
    fi
  fi
  if command -v python3.10 >/dev/null 2>&1; then
    command -v python3.10
    return
  fi
  log "no Python 3.10 found (pyenv's 3.10.13, or python3.10 on PATH); Rasa 3.6 needs it"
  exit 2
}

venv_has_rasa() {
  [ -x "$VENV/bin/python" ] && [ -x "$VENV/bin/rasa" ] &&
    [ "$("$VENV/bin/python" -c 'import importlib.metadata as m; print(m.version("rasa"))' 2>/dev/null)" = "$RASA_VERSION" ]
}

if venv_has_rasa; then
  log "reusing $VENV (rasa $RASA_VERSION)"
else
  PYTHON="$(find_python)"
  log "creating $VENV with $PYTHON and installing assistant/requirements-lock.txt"
  started=$SECONDS
  rm -rf "$VENV"
  "$PYTHON" -m venv "$VENV"
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check \
    -r "$ROOT/assistant/requirements-lock.txt"
  venv_has_rasa || { log "rasa $RASA_VERSION did not install into $VENV"; exit 2; }
  log "venv ready in $((SECONDS - started))s"
fi
PY="$VENV/bin/python"
RASA="$VENV/bin/rasa"

export RASA_TELEMETRY_ENABLED=false
export SQLALCHEMY_SILENCE_UBER_WARNING=1
export TF_CPP_MIN_LOG_LEVEL=2
export PYTHONWARNINGS=ignore
# Rasa's training cache goes to the work dir, not into assistant/.rasa/
export RASA_CACHE_DIRECTORY="$WORK/rasa-cache"

# ---------------------------------------------------------------------------------------
# 2. Train once (each assistant)
# ---------------------------------------------------------------------------------------
log "training the assistant"
started=$SECONDS
if ! (cd "$ROOT/assistant" && "$RASA" train --domain domain --data data --config config.yml \
  --out "$WORK/models" --fixed-model-name assistant) >"$WORK/train.log" 2>&1; then
  show_log "$WORK/train.log"
  log "training failed"
  exit 1
fi
MODEL="$WORK/models/assistant.tar.gz"
log "trained in $((SECONDS - started))s"

MISROUTED_MODEL="$WORK/models/assistant-misrouted.tar.gz"
if [[ " $VARIANTS " == *" misrouted "* ]] && [ "${#MISROUTED_RUN[@]}" -gt 0 ]; then
  log "training the misrouted variant (tests/assistant-misrouted/)"
  started=$SECONDS
  if ! (cd "$ROOT" && "$RASA" train --domain assistant/domain --config assistant/config.yml \
    --data assistant/data/nlu_requests.yml assistant/data/rules.yml tests/assistant-misrouted/data \
    --out "$WORK/models" --fixed-model-name assistant-misrouted) >"$WORK/train-misrouted.log" 2>&1; then
    show_log "$WORK/train-misrouted.log"
    log "training the misrouted variant failed"
    exit 1
  fi
  log "trained in $((SECONDS - started))s"
fi

# ---------------------------------------------------------------------------------------
# 3. Build actiongate
# ---------------------------------------------------------------------------------------
if [ "${E2E_SKIP_BUILD:-0}" != "1" ] && [ -z "${E2E_ACTIONGATE:-}" ]; then
  log "building actiongate and actiongate-dev"
  cargo build --quiet --bin actiongate
  cargo build --quiet --features dev-tools --bin actiongate-dev
fi
[ -x "$BIN" ] || { log "no $BIN"; exit 2; }
[ -x "$DEV" ] || { log "no $DEV"; exit 2; }

# ---------------------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------------------
free_port() {
  "$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

# http_status METHOD URL -> the HTTP status, or 000 when nothing answers
http_status() {
  "$PY" - "$1" "$2" <<'EOF'
import sys, urllib.request, urllib.error
method, url = sys.argv[1], sys.argv[2]
data = b"{}" if method == "POST" else None
req = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
try:
    with urllib.request.urlopen(req, timeout=2) as r:
        print(r.status)
except urllib.error.HTTPError as e:
    print(e.code)
except Exception:
    print("000")
EOF
}

# wait_for URL PID NAME LOG SECONDS: until URL answers 200
wait_for() {
  local url="$1" pid="$2" name="$3" logfile="$4" limit="$5" waited=0
  while [ "$(http_status GET "$url")" != "200" ]; do
    if ! kill -0 "$pid" 2>/dev/null; then
      log "$name exited before it answered $url"
      show_log "$logfile"
      return 1
    fi
    if [ "$waited" -ge $((limit * 4)) ]; then
      log "$name did not answer $url within ${limit}s"
      show_log "$logfile"
      return 1
    fi
    sleep 0.25
    waited=$((waited + 1))
  done
}

AG_PORT="$(free_port)"
SERVICE_PORT="$(free_port)"
RASA_PORT="$(free_port)"
while [ "$SERVICE_PORT" = "$AG_PORT" ]; do SERVICE_PORT="$(free_port)"; done
while [ "$RASA_PORT" = "$AG_PORT" ] || [ "$RASA_PORT" = "$SERVICE_PORT" ]; do RASA_PORT="$(free_port)"; done
AG_URL="http://127.0.0.1:$AG_PORT"
SERVICE_URL="http://127.0.0.1:$SERVICE_PORT"
RASA_URL="http://127.0.0.1:$RASA_PORT"
log "ports: actiongate $AG_PORT, subscription service $SERVICE_PORT, rasa $RASA_PORT"

AG_PID=""
RASA_PID=""
RUN_NO=0

start_actiongate() { # start_actiongate NAME ENDPOINTS_FILE [extra serve args...]
  local name="$1" endpoints="$2"
  shift 2
  RUN_NO=$((RUN_NO + 1))
  local data_dir="$WORK/data-$RUN_NO-$name"
  local logfile="$WORK/actiongate-$RUN_NO-$name.log"
  mkdir -p "$data_dir"
  "$BIN" serve --host 127.0.0.1 --port "$AG_PORT" --embedded-service-port "$SERVICE_PORT" \
    --data-dir "$data_dir" --endpoints "$endpoints" "$@" >"$logfile" 2>&1 &
  AG_PID=$!
  PIDS+=("$AG_PID")
  wait_for "$AG_URL/health" "$AG_PID" "actiongate" "$logfile" 30 || return 1
  # the embedded service answers too (any HTTP status will do)
  local waited=0
  while [ "$(http_status GET "$SERVICE_URL/v1/subscriptions/WS-SUB-3304")" = "000" ]; do
    if [ "$waited" -ge 120 ]; then
      log "the embedded subscription service did not answer on $SERVICE_URL"
      show_log "$logfile"
      return 1
    fi
    sleep 0.25
    waited=$((waited + 1))
  done
}

stop_actiongate() {
  if [ -n "$AG_PID" ]; then
    stop_pid "$AG_PID"
    AG_PID=""
  fi
}

start_rasa() { # start_rasa NAME ENDPOINTS_FILE MODEL [VAR=value ...]
  local name="$1" endpoints="$2" model="$3"
  shift 3
  local logfile="$WORK/rasa-$name.log"
  env "$@" "$RASA" run --enable-api -i 127.0.0.1 -p "$RASA_PORT" -m "$model" \
    --endpoints "$endpoints" --credentials "$ROOT/assistant/credentials.yml" \
    >"$logfile" 2>&1 &
  RASA_PID=$!
  PIDS+=("$RASA_PID")
  wait_for "$RASA_URL/status" "$RASA_PID" "rasa" "$logfile" 120
}

stop_rasa() {
  if [ -n "$RASA_PID" ]; then
    stop_pid "$RASA_PID"
    RASA_PID=""
  fi
}

TOTAL_PASSED=0
TOTAL_FAILED=0

# check_nlu: the NLU check (above) against the running Rasa, once
NLU_CHECKED=0
check_nlu() {
  [ "${E2E_NLU:-1}" = "1" ] && [ "$NLU_CHECKED" = "0" ] || return 0
  NLU_CHECKED=1
  log "[nlu] $NLU_REPLIES through POST /model/parse"
  local out="$WORK/nlu.out" rc
  set +e
  "$PY" - "$RASA_URL" "$ROOT/$NLU_REPLIES" >"$out" 2>&1 <<'PYEOF'
import json, sys, urllib.request
import yaml

url, path = sys.argv[1], sys.argv[2]
with open(path, encoding="utf-8") as f:
    doc = yaml.safe_load(f) or {}
unknown = sorted(set(doc) - {"affirm", "not_affirm"})
if unknown or not doc.get("affirm") or not doc.get("not_affirm"):
    sys.exit(f"{path}: expected two non-empty lists, affirm and not_affirm (unknown: {unknown})")
misread = 0
for expect in ("affirm", "not_affirm"):
    for text in doc[expect]:
        request = urllib.request.Request(
            url + "/model/parse", method="POST", data=json.dumps({"text": text}).encode(),
            headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=10) as answer:
            intent = json.load(answer).get("intent") or {}
        name, confidence = intent.get("name"), intent.get("confidence") or 0.0
        if expect == "affirm":
            ok = name == "affirm" and confidence >= 0.8
        else:
            ok = name != "affirm"
        misread += not ok
        print(f"{'ok  ' if ok else 'FAIL'} {expect:<10} -> {name!s:<18} {confidence:.2f}  {text}")
print(f"{misread} misread")
sys.exit(1 if misread else 0)
PYEOF
  rc=$?
  set -e
  sed "s/^/  [nlu] /" "$out"
  if [ "$rc" = "0" ]; then
    echo "PASS $NLU_REPLIES"
    TOTAL_PASSED=$((TOTAL_PASSED + 1))
  else
    echo "FAIL $NLU_REPLIES"
    TOTAL_FAILED=$((TOTAL_FAILED + 1))
  fi
}

# run_files VARIANT ENDPOINTS_FILE [extra serve args...]: every file of RUN_FILES against
# a fresh actiongate, which reads the same endpoints file as Rasa
RUN_FILES=("${FILES[@]}")
run_files() {
  local variant="$1" endpoints="$2"
  shift 2
  local file out summary passed failed
  for file in "${RUN_FILES[@]}"; do
    local rel="${file#"$ROOT"/}"
    log "[$variant] $rel"
    if ! start_actiongate "$variant" "$endpoints" "$@"; then
      stop_actiongate
      FAILED_SETUP=1
      continue
    fi
    out="$WORK/converse-$RUN_NO-$variant.out"
    set +e
    "$DEV" converse "$file" --rasa "$RASA_URL" --service "$SERVICE_URL" >"$out" 2>&1
    local rc=$?
    set -e
    sed "s/^/  [$variant] /" "$out"
    summary="$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$out" | tail -n 1 || true)"
    if [ -z "$summary" ]; then
      log "[$variant] $rel: no summary from actiongate-dev converse (exit $rc)"
      show_log "$WORK/actiongate-$RUN_NO-$variant.log"
      FAILED_SETUP=1
    else
      passed="${summary%% passed*}"
      failed="${summary#*passed, }"
      failed="${failed%% failed*}"
      TOTAL_PASSED=$((TOTAL_PASSED + passed))
      TOTAL_FAILED=$((TOTAL_FAILED + failed))
      if [ "$failed" != "0" ]; then
        show_log "$WORK/actiongate-$RUN_NO-$variant.log"
      fi
    fi
    stop_actiongate
  done
}

write_endpoints() { # write_endpoints FILE [TOKEN]
  {
    echo "action_endpoint:"
    echo "  url: \"$AG_URL/webhook\""
    if [ -n "${2:-}" ]; then
      echo "  token: \"$2\""
    fi
  } >"$1"
}

# run_console: the `console` set-up (below)
run_console() {
  local admin_port hash out summary
  admin_port="$(free_port)"
  hash="$(printf 'correct horse battery\n' | "$BIN" hash-password)"
  write_endpoints "$WORK/endpoints-console.yml"
  printf '%s\n' "actiongate:" "  approval:" "    notify_rasa_url: \"$RASA_URL\"" "  console:" \
    "    operators:" "      - name: ana" "        password_hash: \"$hash\"" >>"$WORK/endpoints-console.yml"
  start_rasa console "$WORK/endpoints-console.yml" "$MODEL" || return 1
  start_actiongate console "$WORK/endpoints-console.yml" --admin-port "$admin_port" || return 1
  log "[console] tests/conversations/held_for_approval.yml, then the approval in a browser"
  out="$WORK/converse-console.out"
  "$DEV" converse "$ROOT/tests/conversations/held_for_approval.yml" --rasa "$RASA_URL" \
    --service "$SERVICE_URL" >"$out" 2>&1 || true
  out2="$WORK/browser-console.out"
  bash "$ROOT/scripts/console-browser.sh" --approve-held "http://127.0.0.1:$admin_port" \
    "$SERVICE_URL" "$RASA_URL" >"$out2" 2>&1 || true
  local file
  for file in "$out" "$out2"; do
    sed "s/^/  [console] /" "$file"
    summary="$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$file" | tail -n 1 || true)"
    if [ -z "$summary" ]; then
      log "[console] no summary in $(basename "$file")"
      show_log "$WORK/actiongate-$RUN_NO-console.log"
      stop_actiongate
      return 1
    fi
    TOTAL_PASSED=$((TOTAL_PASSED + ${summary%% passed*}))
    local failed="${summary#*passed, }"
    TOTAL_FAILED=$((TOTAL_FAILED + ${failed%% failed*}))
  done
  stop_actiongate
}

# run_stripe: the `stripe` set-up (below)
run_stripe() {
  source "$ROOT/scripts/localstripe.sh"
  localstripe_venv || return 1
  mkdir -p "$WORK/stripe"
  localstripe_start "$WORK/stripe" >"$WORK/stripe/seed.out" 2>&1 || { cat "$WORK/stripe/seed.out" >&2; return 1; }
  PIDS+=("$LOCALSTRIPE_PID")
  local customer subscription file="$WORK/stripe/stop_renewal.yml" out="$WORK/converse-stripe.out"
  customer="$("$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["customers"]["e2e"]["customer"])' "$WORK/stripe/seed.json")"
  subscription="$("$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["customers"]["e2e"]["subscription"])' "$WORK/stripe/seed.json")"
  sed -e "s/CUSTOMER_ID/$customer/g" -e "s/SUBSCRIPTION_ID/$subscription/g" \
    "$ROOT/tests/conversations/stripe/stop_renewal.yml" >"$file"
  start_rasa stripe "$WORK/endpoints.yml" "$MODEL" || return 1
  RUN_NO=$((RUN_NO + 1))
  local logfile="$WORK/actiongate-$RUN_NO-stripe.log"
  mkdir -p "$WORK/data-$RUN_NO-stripe"
  STRIPE_API_KEY=sk_test_actiongate "$BIN" serve --host 127.0.0.1 --port "$AG_PORT" \
    --data-dir "$WORK/data-$RUN_NO-stripe" --endpoints "$WORK/endpoints.yml" \
    --subscriptions-provider stripe --stripe-api-base "$LOCALSTRIPE_URL" >"$logfile" 2>&1 &
  AG_PID=$!
  PIDS+=("$AG_PID")
  wait_for "$AG_URL/health" "$AG_PID" "actiongate" "$logfile" 30 || return 1
  log "[stripe] tests/conversations/stripe/stop_renewal.yml ($subscription of $customer)"
  "$DEV" converse "$file" --rasa "$RASA_URL" --service "$LOCALSTRIPE_URL" \
    --service-token sk_test_actiongate >"$out" 2>&1 || true
  sed "s/^/  [stripe] /" "$out"
  local summary failed
  summary="$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$out" | tail -n 1 || true)"
  if [ -z "$summary" ]; then
    log "[stripe] no summary from actiongate-dev converse"
    show_log "$logfile"
    stop_actiongate
    return 1
  fi
  TOTAL_PASSED=$((TOTAL_PASSED + ${summary%% passed*}))
  failed="${summary#*passed, }"
  failed="${failed%% failed*}"
  TOTAL_FAILED=$((TOTAL_FAILED + failed))
  [ "$failed" = "0" ] || show_log "$logfile"
  stop_actiongate
}

# ---------------------------------------------------------------------------------------
# 4. The set-ups
# ---------------------------------------------------------------------------------------
write_endpoints "$WORK/endpoints.yml"
# The token set-up reads its token from the environment, and its file has the sections and
# keys a Rasa Pro deployment's has: Rasa 3.6.21 and actiongate both load it (CONTRACT.md
# section 0), and the calls only pass the token check if both replaced ${ACTION_TOKEN}.
export ACTION_TOKEN="$TOKEN"
cat >"$WORK/endpoints-token.yml" <<YAML
action_endpoint:
  url: "$AG_URL/webhook"
  token: \${ACTION_TOKEN}
  token_name: token
  params:
    deployment: e2e
  headers:
    X-Deployment: e2e
  ssl_client_cert: client.pem
  ssl_client_key: client.key
  timeout: 10
tracing:
  type: otlp
  endpoint: http://127.0.0.1:4318
  insecure: true
metrics:
  type: otlp
  endpoint: http://127.0.0.1:4318
mcp_servers:
  - name: billing
    url: http://127.0.0.1:9999/mcp
    type: http
a2a_server:
  enabled: false
privacy:
  anonymization: {}
YAML

for variant in $VARIANTS; do
  case "$variant" in
    plain)
      start_rasa plain "$WORK/endpoints.yml" "$MODEL" || { FAILED_SETUP=1; stop_rasa; continue; }
      check_nlu
      run_files plain "$WORK/endpoints.yml"
      ;;
    compressed)
      start_rasa compressed "$WORK/endpoints.yml" "$MODEL" COMPRESS_ACTION_SERVER_REQUEST=true ||
        { FAILED_SETUP=1; stop_rasa; continue; }
      check_nlu
      run_files compressed "$WORK/endpoints.yml"
      ;;
    token)
      start_rasa token "$WORK/endpoints-token.yml" "$MODEL" || { FAILED_SETUP=1; stop_rasa; continue; }
      check_nlu
      # `actiongate check` takes the same file
      if ! "$BIN" check --endpoints "$WORK/endpoints-token.yml" --project "$ROOT/assistant" \
        >"$WORK/check-token.out" 2>&1; then
        log "[token] actiongate check refused the Rasa Pro-shaped endpoints.yml:"
        sed 's/^/  /' "$WORK/check-token.out" >&2
        FAILED_SETUP=1
      fi
      # the server must refuse a call without the token, and with the literal text the
      # file holds (CONTRACT.md, section 0); the token comes from the file, no flag
      if start_actiongate token-check "$WORK/endpoints-token.yml"; then
        status="$(http_status POST "$AG_URL/webhook")"
        literal="$(http_status POST "$AG_URL/webhook?token=%24%7BACTION_TOKEN%7D")"
        if [ "$status" != "401" ] || [ "$literal" != "401" ]; then
          log "[token] POST /webhook without the token answered $status, with \${ACTION_TOKEN} $literal, not 401"
          FAILED_SETUP=1
        fi
      else
        FAILED_SETUP=1
      fi
      stop_actiongate
      run_files token "$WORK/endpoints-token.yml"
      ;;
    misrouted)
      if [ "${#MISROUTED_RUN[@]}" -eq 0 ]; then
        log "[misrouted] none of the files is in MISROUTED_FILES; skipped"
        continue
      fi
      start_rasa misrouted "$WORK/endpoints.yml" "$MISROUTED_MODEL" ||
        { FAILED_SETUP=1; stop_rasa; continue; }
      RUN_FILES=("${MISROUTED_RUN[@]}")
      run_files misrouted "$WORK/endpoints.yml"
      RUN_FILES=("${FILES[@]}")
      ;;
    console)
      # The held change a real conversation leaves, approved in the operator console in a
      # real browser (scripts/console-browser.sh --approve-held); actiongate tells Rasa the
      # decision through its HTTP API, and Rasa's rule runs check_subscription_change.
      if [ "$#" -gt 0 ] && ! printf '%s\n' "${FILES[@]}" | grep -q held_for_approval; then
        log "[console] held_for_approval.yml not named; skipped"
        continue
      fi
      run_console || FAILED_SETUP=1
      ;;
    stripe)
      # actiongate with `provider: stripe` against localstripe (scripts/localstripe.sh),
      # one conversation (tests/conversations/stripe/stop_renewal.yml, the seed's ids
      # written in), Stripe's record read back through localstripe's API.
      if [ "$#" -gt 0 ]; then
        log "[stripe] files named on the command line; skipped"
        continue
      fi
      run_stripe || FAILED_SETUP=1
      ;;
    *)
      log "unknown variant $variant"
      FAILED_SETUP=1
      ;;
  esac
  stop_rasa
done

# The NLU check, when no set-up above ran the assistant's own model
if [ "${E2E_NLU:-1}" = "1" ] && [ "$NLU_CHECKED" = "0" ]; then
  if start_rasa nlu "$WORK/endpoints.yml" "$MODEL"; then
    check_nlu
  else
    FAILED_SETUP=1
  fi
  stop_rasa
fi

# ---------------------------------------------------------------------------------------
# 5. The Mantle forwarder (skills/subscription_change/tools.py) against actiongate
# ---------------------------------------------------------------------------------------
if [ "${E2E_MANTLE:-1}" = "1" ] && [ "$#" -eq 0 ]; then
  if ! "$PY" -c 'import pytest' 2>/dev/null; then
    log "installing pytest into $VENV (constrained by the lock)"
    "$PY" -m pip install --quiet --disable-pip-version-check pytest \
      -c "$ROOT/assistant/requirements-lock.txt"
  fi
  log "[mantle] tests/mantle"
  set +e
  ACTIONGATE_BIN="$BIN" "$PY" -m pytest -p no:cacheprovider -q tests/mantle >"$WORK/mantle.out" 2>&1
  rc=$?
  set -e
  sed "s/^/  [mantle] /" "$WORK/mantle.out"
  last="$(tail -n 1 "$WORK/mantle.out")"
  m_passed=0
  m_failed=0
  if [[ "$last" =~ ([0-9]+)\ passed ]]; then m_passed=${BASH_REMATCH[1]}; fi
  if [[ "$last" =~ ([0-9]+)\ failed ]]; then m_failed=$((m_failed + BASH_REMATCH[1])); fi
  if [[ "$last" =~ ([0-9]+)\ error ]]; then m_failed=$((m_failed + BASH_REMATCH[1])); fi
  TOTAL_PASSED=$((TOTAL_PASSED + m_passed))
  TOTAL_FAILED=$((TOTAL_FAILED + m_failed))
  if [ "$rc" != "0" ] && [ "$m_failed" = "0" ]; then
    log "[mantle] pytest exited $rc"
    FAILED_SETUP=1
  fi
fi

if [ "$FAILED_SETUP" != "0" ]; then
  log "some set-ups could not run (see above)"
fi
echo "$TOTAL_PASSED passed, $TOTAL_FAILED failed"
if [ "$TOTAL_FAILED" != "0" ] || [ "$FAILED_SETUP" != "0" ] || [ "$TOTAL_PASSED" = "0" ]; then
  exit 1
fi
