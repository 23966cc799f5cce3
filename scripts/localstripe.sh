# Sourced by scripts/test-stripe.sh and scripts/rasa-e2e.sh: localstripe (a stateful
# stand-in for Stripe's API) from the pinned list tests/stripe/requirements.txt, started on
# a free port and seeded with Stripe's own Python client (tests/stripe/seed.py).
#
#   localstripe_venv             makes $STRIPE_VENV (default .venv-stripe) when missing or
#                                made from another list
#   localstripe_start WORK_DIR   starts it from scratch and seeds it: LOCALSTRIPE_URL,
#                                LOCALSTRIPE_PID, and the seed's ids in WORK_DIR/seed.json
#
# localstripe keeps its state in /tmp/localstripe.pickle: two at once would share it.
STRIPE_VENV="${STRIPE_VENV:-$ROOT/.venv-stripe}"

localstripe_venv() {
  local requirements="$ROOT/tests/stripe/requirements.txt" stamp="$STRIPE_VENV/.requirements"
  if ! cmp -s "$requirements" "$stamp" 2>/dev/null; then
    printf '[localstripe] making %s from tests/stripe/requirements.txt\n' "$STRIPE_VENV" >&2
    [[ -x "$STRIPE_VENV/bin/python" ]] || python3 -m venv "$STRIPE_VENV"
    "$STRIPE_VENV/bin/pip" install -q -r "$requirements"
    cp "$requirements" "$stamp"
  fi
}

localstripe_start() {
  local work="$1" port=""
  "$STRIPE_VENV/bin/localstripe" --port 0 --from-scratch >"$work/localstripe.out" 2>"$work/localstripe.err" &
  LOCALSTRIPE_PID=$!
  for _ in $(seq 1 100); do
    port=$(sed -n 's/.*Running on http:\/\/\[::\]:\([0-9]*\).*/\1/p' "$work/localstripe.out" | head -1)
    [[ -n "$port" ]] && break
    sleep 0.1
  done
  if [[ -z "$port" ]]; then
    cat "$work/localstripe.out" "$work/localstripe.err" >&2
    printf '[localstripe] did not start\n' >&2
    return 1
  fi
  LOCALSTRIPE_URL="http://127.0.0.1:$port"
  "$STRIPE_VENV/bin/python" "$ROOT/tests/stripe/seed.py" "$LOCALSTRIPE_URL" "$work/seed.json"
}
