#!/usr/bin/env bash
# The Stripe suite: actiongate with `provider: stripe` against localstripe (a stateful
# stand-in for Stripe's API), seeded with Stripe's own Python client; the ignored tests of
# tests/api/stripe.rs run against it, then the part of the consent matrix that applies.
#
# Needs: python3 (3.11), cargo. The venv (.venv-stripe, or STRIPE_VENV) is made from the
# pinned list tests/stripe/requirements.txt when missing or different. localstripe keeps
# its state in /tmp/localstripe.pickle: it starts from scratch here, and two runs at once
# would share that file.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
VENV="${STRIPE_VENV:-$ROOT/.venv-stripe}"
REQUIREMENTS="$ROOT/tests/stripe/requirements.txt"
log() { printf '[test-stripe] %s\n' "$*"; }
# The key localstripe accepts (any sk_…), read as the server reads it.
export STRIPE_API_KEY=sk_test_actiongate

stamp="$VENV/.requirements"
if ! cmp -s "$REQUIREMENTS" "$stamp" 2>/dev/null; then
  log "making $VENV from tests/stripe/requirements.txt"
  [[ -x "$VENV/bin/python" ]] || python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q -r "$REQUIREMENTS"
  cp "$REQUIREMENTS" "$stamp"
fi

WORK=$(mktemp -d)
pid=
cleanup() { [[ -n "$pid" ]] && kill "$pid" 2>/dev/null; wait 2>/dev/null || true; rm -rf "$WORK"; }
trap cleanup EXIT

"$VENV/bin/localstripe" --port 0 --from-scratch >"$WORK/stdout" 2>"$WORK/stderr" &
pid=$!
port=
for _ in $(seq 1 100); do
  port=$(sed -n 's/.*Running on http:\/\/\[::\]:\([0-9]*\).*/\1/p' "$WORK/stdout" | head -1)
  [[ -n "$port" ]] && break
  sleep 0.1
done
[[ -n "$port" ]] || { cat "$WORK/stdout" "$WORK/stderr"; log "localstripe did not start"; exit 1; }
BASE="http://127.0.0.1:$port"
log "localstripe on $BASE"
"$VENV/bin/python" tests/stripe/seed.py "$BASE" "$WORK/seed.json"

RUST_BACKTRACE=0 ACTIONGATE_TEST_STRIPE_URL="$BASE" ACTIONGATE_TEST_STRIPE_SEED="$WORK/seed.json" \
  cargo test --quiet -p actiongate --test api stripe:: -- --ignored --test-threads 4

# The part of the consent matrix that applies to Stripe, through the guard and through a
# naive apply, against the same localstripe: the figures are printed, and a guard that
# does not score 0 and 0 fails the suite.
log "the consent matrix against Stripe"
cargo run --quiet --features dev-tools --bin actiongate-dev -- \
  eval eval/consent-matrix.yml --stripe-api-base "$BASE" --quiet
