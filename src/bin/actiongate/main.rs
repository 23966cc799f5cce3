//! The `actiongate` binary: parse the command line, start logging, run the command. The
//! product's commands come from the library; `converse` and `eval` from the tools crate.

mod eval;

use std::process::ExitCode;

use clap::Parser;

use actiongate::cli::{Cli, Command};
use actiongate::{app, telemetry};
use tools::conversation_tests;

#[tokio::main]
async fn main() -> ExitCode {
    actionserver::keep_freed_memory();
    let cli = Cli::parse();
    let command = cli.command.unwrap_or(Command::Serve(cli.serve));
    let log = match &command {
        Command::Serve(a) => a.log.clone(),
        Command::Check(a) => a.log.clone(),
        Command::SubscriptionService(a) => a.log.clone(),
        Command::Audit(a) => a.log.clone(),
        Command::Approvals(a) => a.serve.log.clone(),
        Command::HashPassword => actiongate::cli::LogArgs {
            verbose: 0,
            quiet: true,
            log_format: telemetry::LogFormat::Text,
        },
        Command::Converse(a) => a.log.clone(),
        Command::Eval(a) => a.log.clone(),
    };
    // The eval runs hundreds of in-process servers: their request logs only at -v.
    let quiet = log.quiet || (matches!(command, Command::Eval(_)) && log.verbose == 0);
    // Only `serve` exports traces; a section it cannot read is reported by serve itself.
    let traces = match &command {
        Command::Serve(args) => actiongate::config::trace_settings(args).ok().flatten(),
        _ => None,
    };
    let exporting = telemetry::init(log.verbose, quiet, log.log_format, traces.as_ref());
    match command {
        Command::Serve(args) => {
            let code = report(app::serve(&args).await);
            if let Some(exporting) = exporting {
                let _ = tokio::task::spawn_blocking(move || {
                    exporting.shutdown(std::time::Duration::from_secs(5))
                })
                .await;
            }
            code
        }
        Command::SubscriptionService(args) => report(app::subscription_service(&args).await),
        Command::Check(args) => {
            let report = actiongate::project_lint::run(&args);
            for problem in &report.problems {
                eprintln!("{problem}");
            }
            for note in &report.notes {
                println!("{note}");
            }
            if report.problems.is_empty() {
                println!("configuration OK");
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
        Command::HashPassword => {
            let mut password = String::new();
            if std::io::stdin().read_line(&mut password).is_err()
                || password.trim_end_matches(['\r', '\n']).is_empty()
            {
                eprintln!("error: give the password on standard input");
                return ExitCode::from(2);
            }
            println!(
                "{}",
                actiongate::console::auth::hash_password(password.trim_end_matches(['\r', '\n']))
            );
            ExitCode::SUCCESS
        }
        Command::Approvals(args) => match actiongate::approvals_cli::run(&args).await {
            Ok(text) => {
                print!("{text}");
                ExitCode::SUCCESS
            }
            Err(e) => report::<()>(Err(e)),
        },
        Command::Audit(args) => match actiongate::audit_report::report(&args).await {
            Ok(text) => {
                print!("{text}");
                ExitCode::SUCCESS
            }
            Err(e) => report::<()>(Err(e)),
        },
        Command::Eval(args) => match eval::run(&args).await {
            Ok(true) => ExitCode::SUCCESS,
            Ok(false) => ExitCode::FAILURE,
            Err(e) => {
                eprintln!("error: {e}");
                ExitCode::from(2)
            }
        },
        Command::Converse(args) => {
            let result = conversation_tests::run(conversation_tests::ConverseArgs {
                files: args.files,
                rasa: args.rasa,
                rasa_token: args.rasa_token,
                service: args.service,
                service_token: args.service_token,
                timeout_secs: args.timeout_secs,
            })
            .await;
            match result {
                Ok(summary) if summary.failed == 0 => ExitCode::SUCCESS,
                Ok(_) => ExitCode::FAILURE,
                Err(e) => {
                    eprintln!("error: {e}");
                    ExitCode::from(2)
                }
            }
        }
    }
}

fn report<T>(result: Result<T, app::StartError>) -> ExitCode {
    match result {
        Ok(_) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
