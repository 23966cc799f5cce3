//! The `actiongate` binary: the command line parsed, the command run
//! ([`actiongate::commands`]).

use std::process::ExitCode;

use clap::Parser;

/// mimalloc, with its per-thread free lists, where glibc's malloc spent about 12 % of a
/// call's CPU (its locks and consolidation). Measured with the binary built both ways, alternated
/// runs (README, "The allocator"): a call on a new connection 146 → 118 µs, a gRPC call
/// 365 → 240 µs, a new change 550 → 484 µs; peak RSS the same at 10 events and about 10 %
/// more with sixteen 10,000-event trackers at once. Transparent huge pages are off
/// (the `no_thp` feature): with them the idle heap grew by 20 MiB for no CPU gained.
/// glibc's malloc still serves SQLite, tuned by `keep_freed_memory`.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> ExitCode {
    actionserver::keep_freed_memory();
    actiongate::commands::run(actiongate::cli::Cli::parse()).await
}
