//! The `actiongate` binary: the command line parsed, the command run
//! ([`actiongate::commands`]).

use std::process::ExitCode;

use clap::Parser;

#[tokio::main]
async fn main() -> ExitCode {
    actionserver::keep_freed_memory();
    actiongate::commands::run(actiongate::cli::Cli::parse()).await
}
