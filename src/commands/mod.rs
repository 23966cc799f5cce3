//! The `actiongate` binary's commands, one file each: [`run`] starts logging (and, for
//! `serve`, trace export) as the command's flags say, runs the command the command line
//! names (`serve` when none is), and answers with the process's exit code.

pub mod approvals;
pub mod audit;
pub mod check;
mod hash_password;

use std::process::ExitCode;
use std::time::Duration;

use crate::app::{self, StartError};
use crate::cli::{Cli, Command, LogArgs};
use crate::telemetry::{self, LogFormat};

/// Runs the command `cli` names.
pub async fn run(cli: Cli) -> ExitCode {
    let command = cli.command.unwrap_or(Command::Serve(cli.serve));
    let log = command.log();
    // Only `serve` exports traces; a section it cannot read is reported by serve itself.
    let traces = match &command {
        Command::Serve(args) => crate::config::trace_settings(args).ok().flatten(),
        _ => None,
    };
    let exporting = telemetry::init(log.verbose, log.quiet, log.log_format, traces.as_ref());
    let code = match command {
        Command::Serve(args) => exit(app::serve(&args).await),
        Command::SubscriptionService(args) => exit(app::subscription_service(&args).await),
        Command::Check(args) => check::report(&check::run(&args)),
        Command::HashPassword => hash_password::run(),
        Command::Approvals(args) => printed(approvals::run(&args).await),
        Command::Audit(args) => printed(audit::report(&args).await),
    };
    if let Some(exporting) = exporting {
        // The spans still queued, sent before the process ends (at most 5 s).
        let _ =
            tokio::task::spawn_blocking(move || exporting.shutdown(Duration::from_secs(5))).await;
    }
    code
}

impl Command {
    /// The command's logging flags.
    pub fn log(&self) -> LogArgs {
        match self {
            Self::Serve(a) => a.log.clone(),
            Self::Check(a) => a.log.clone(),
            Self::SubscriptionService(a) => a.log.clone(),
            Self::Audit(a) => a.log.clone(),
            Self::Approvals(a) => a.serve.log.clone(),
            // It prints only the hash.
            Self::HashPassword => LogArgs {
                verbose: 0,
                quiet: true,
                log_format: LogFormat::Text,
            },
        }
    }
}

/// Success, or the error on standard error and exit code 1.
pub fn exit<T>(result: Result<T, StartError>) -> ExitCode {
    match result {
        Ok(_) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// A command's text on standard output, or its error.
fn printed(result: Result<String, StartError>) -> ExitCode {
    result
        .map(|text| print!("{text}"))
        .map_or_else(|e| exit::<()>(Err(e)), |()| ExitCode::SUCCESS)
}
