//! The `actiongate` binary: the command line parsed, the command run
//! ([`actiongate::commands`]).

use std::process::ExitCode;

use clap::Parser;

/// mimalloc, with its per-thread free lists, where glibc's malloc spent about 12 % of a
/// call's CPU (its locks, and consolidating freed chunks). The binary built both ways, in
/// alternated runs (the README's "The allocator" has the table): a select at 10 events
/// 92 → 80 µs, over gRPC 380 → 250 µs, a new change 550–614 → 484–509 µs; peak RSS the
/// same at 10 events, more with many large trackers at once (sixteen of 1,000 events:
/// 50 → 70–89 MiB). Transparent huge pages are off (the `no_thp` feature): with them the
/// heap at 10 events grew by 20 MiB for no CPU gained. glibc's malloc still serves
/// SQLite, tuned by `keep_freed_memory`.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> ExitCode {
    actionserver::keep_freed_memory();
    actiongate::commands::run(actiongate::cli::Cli::parse()).await
}
