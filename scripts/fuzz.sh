#!/usr/bin/env bash
# Fuzzing with cargo-fuzz (libFuzzer), on stable Rust.
#
#   bash scripts/fuzz.sh [SECONDS_PER_TARGET]   (default 60)
#
# The targets live in fuzz/ (a crate of its own, outside the main build):
#   body_decode        server::body::decode, every Content-Encoding, any limit
#   webhook_parse      the webhook body as JSON, the tracker's helpers, re-serialising
#   conversation_read  conversation::read over a generated or raw event list, checked
#                      against a plain reference reading
#   guard              check_conversation + compare_facts: approve exactly when every
#                      fact matches (prints `guard-stats:` lines: how often it approved)
#
# 1. installs cargo-fuzz if it is missing (`cargo install cargo-fuzz --locked`);
# 2. builds every target once with `cargo fuzz build --sanitizer none`: cargo-fuzz's only
#    nightly-only flag is the sanitizer's `-Zsanitizer=...`; the coverage instrumentation
#    (`-Cpasses=sancov-module`, `-Cllvm-args=-sanitizer-coverage-*`) and `--cfg fuzzing`
#    are stable. Release mode with debug assertions and overflow checks on (cargo-fuzz's
#    default). No RUSTC_BOOTSTRAP needed.
# 3. runs each target's binary for SECONDS_PER_TARGET (libFuzzer `-max_total_time`), one
#    at a time (the machine has 2 cores), on its corpus fuzz/corpus/<target> (webhook_parse
#    and conversation_read seeded from tests/fixtures/rasa-3.6.21/*.json), crashes to
#    fuzz/artifacts/<target>/;
# 4. stops at the first crash (the remaining targets are skipped), prints a line per target
#    and `N passed, M failed, K skipped`; exits non-zero if any target crashed.
#
# A crash input replays with `fuzz/target/<host>/release/<target> <file>`; once
# understood it belongs in tests/fuzz_regressions/<target>/ (see tests/api/fuzz_regressions.rs
# for each folder's format).
#
# Environment: FUZZ_TARGETS="body_decode guard" (which targets), FUZZ_KEEP_GOING=1 (run the
# remaining targets after a crash), FUZZ_ARGS="-seed=1 ..." (more libFuzzer options), FUZZ_SKIP_BUILD=1.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT/fuzz"

SECONDS_PER_TARGET="${1:-60}"
case "$SECONDS_PER_TARGET" in
  '' | *[!0-9]*) echo "usage: scripts/fuzz.sh [SECONDS_PER_TARGET]" >&2; exit 2 ;;
esac
TARGETS="${FUZZ_TARGETS:-body_decode webhook_parse conversation_read guard}"
HOST="$(rustc -vV | sed -n 's/^host: //p')"
BIN="$ROOT/fuzz/target/$HOST/release"
LOGS="$ROOT/fuzz/target/fuzz-logs"

if ! cargo fuzz --version >/dev/null 2>&1; then
  echo "installing cargo-fuzz"
  cargo install cargo-fuzz --locked
fi

if [ "${FUZZ_SKIP_BUILD:-0}" != 1 ]; then
  echo "building the fuzz targets (cargo fuzz build --sanitizer none)"
  cargo fuzz build --sanitizer none --target "$HOST" --target-dir "$ROOT/fuzz/target"
fi

# Seeds: the real Rasa requests as they are, and their events arrays (with the form byte
# conversation_read reads first: even means "the rest is the events array").
mkdir -p corpus/webhook_parse corpus/conversation_read "$LOGS"
for fixture in "$ROOT"/tests/fixtures/rasa-3.6.21/*.json; do
  [ -e "$fixture" ] || continue
  name="$(basename "$fixture" .json)"
  cp "$fixture" "corpus/webhook_parse/seed-$name.json"
  if command -v python3 >/dev/null 2>&1; then
    python3 - "$fixture" "corpus/conversation_read/seed-$name" <<'PY' || true
import json, sys
events = json.load(open(sys.argv[1]))["tracker"]["events"]
open(sys.argv[2], "wb").write(b"\0" + json.dumps(events).encode())
PY
  fi
done

passed=0
failed=0
skipped=0
stop=0
for target in $TARGETS; do
  if [ "$stop" = 1 ]; then
    printf '%-18s skipped (an earlier target crashed)\n' "$target"
    skipped=$((skipped + 1))
    continue
  fi
  mkdir -p "corpus/$target" "artifacts/$target"
  args=(-max_total_time="$SECONDS_PER_TARGET" -timeout=10 -rss_limit_mb=4096
    -print_final_stats=1 -artifact_prefix="artifacts/$target/")
  case "$target" in
    webhook_parse | conversation_read) args+=(-dict=dicts/json.dict) ;;
  esac
  # shellcheck disable=SC2206
  extra=(${FUZZ_ARGS:-})
  log="$LOGS/$target.log"
  rc=0
  "$BIN/$target" "${args[@]}" "${extra[@]}" "corpus/$target" >"$log" 2>&1 || rc=$?
  runs="$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n1)"
  rate="$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -n1)"
  stats="$(grep '^guard-stats:' "$log" | tail -n1 | sed 's/^guard-stats: //' || true)"
  if [ "$rc" = 0 ]; then
    printf '%-18s passed: %s runs in %ss, %s exec/s%s\n' "$target" "${runs:-?}" \
      "$SECONDS_PER_TARGET" "${rate:-?}" "${stats:+; $stats}"
    passed=$((passed + 1))
  else
    crash="$(grep -o "artifacts/$target/[^ ]*" "$log" | tail -n1 || true)"
    printf '%-18s FAILED (exit %s): %s\n' "$target" "$rc" "${crash:-no crash file; see $log}"
    grep -m1 -A1 "panicked at" "$log" | sed 's/^/    /' || true
    echo "    log: $log"
    failed=$((failed + 1))
    [ "${FUZZ_KEEP_GOING:-0}" = 1 ] || stop=1
  fi
done

echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" = 0 ]
