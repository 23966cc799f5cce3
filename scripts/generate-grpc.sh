#!/usr/bin/env bash
# Regenerates crates/actionserver/src/grpc/proto.rs from
# crates/actionserver/proto/action_webhook.proto (a pure-Rust proto compiler; no protoc).
# The output is checked in: run this after changing the .proto, then cargo fmt.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
cargo run --quiet --manifest-path crates/actionserver/proto/generate/Cargo.toml
cargo fmt --all
