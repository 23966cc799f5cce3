#!/usr/bin/env bash
# Runs the store's PostgreSQL suites (the `postgres` twins of tests/api/durability.rs).
#
#   bash scripts/test-postgres.sh
#
# Uses ACTIONGATE_TEST_POSTGRES_URL when it is set (a role that may CREATE DATABASE);
# otherwise installs PostgreSQL from Debian's packages when it is missing, starts the
# local cluster, and creates the role actiongate (password actiongate) on 127.0.0.1
# (scripts/postgres.sh).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

log() { printf '[test-postgres] %s\n' "$*" >&2; }
# shellcheck source=scripts/postgres.sh
. scripts/postgres.sh
start_postgres

log "running the PostgreSQL suites against ${ACTIONGATE_TEST_POSTGRES_URL%%@*}@..."
cargo test --test api durability:: -- --ignored
