#!/usr/bin/env bash
# The Stripe suite: actiongate with `provider: stripe` against localstripe (a stateful
# stand-in for Stripe's API), seeded with Stripe's own Python client; the ignored tests of
# tests/api/stripe.rs run against it, then the part of the consent matrix that applies.
#
# Needs: python3 (3.11), cargo. The venv (.venv-stripe, or STRIPE_VENV) is made from the
# pinned list tests/stripe/requirements.txt when missing or different (scripts/localstripe.sh).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
log() { printf '[test-stripe] %s\n' "$*"; }
# The key localstripe accepts (any sk_…), read as the server reads it.
export STRIPE_API_KEY=sk_test_actiongate
source "$ROOT/scripts/localstripe.sh"
localstripe_venv

WORK=$(mktemp -d)
cleanup() {
  [[ -n "${LOCALSTRIPE_PID:-}" ]] && kill "$LOCALSTRIPE_PID" 2>/dev/null
  wait 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT

localstripe_start "$WORK"
BASE="$LOCALSTRIPE_URL"
log "localstripe on $BASE"

RUST_BACKTRACE=0 ACTIONGATE_TEST_STRIPE_URL="$BASE" ACTIONGATE_TEST_STRIPE_SEED="$WORK/seed.json" \
  cargo test --quiet -p actiongate --test api stripe:: -- --ignored --test-threads 4

# The part of the consent matrix that applies to Stripe, through the guard and through a
# naive apply, against the same localstripe: the figures are printed, and a guard that
# does not score 0 and 0 fails the suite.
log "the consent matrix against Stripe"
cargo run --quiet --features dev-tools --bin actiongate-dev -- \
  eval eval/consent-matrix.yml --stripe-api-base "$BASE" --quiet
