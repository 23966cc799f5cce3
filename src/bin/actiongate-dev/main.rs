//! `actiongate-dev`: the developer tools, kept out of the shipped binary (built with
//! `--features dev-tools`): `converse` runs conversation tests against a running Rasa,
//! `eval` replays the consent matrix and the reply corpus.

mod eval;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};

use actiongate::cli::LogArgs;
use actiongate::telemetry;
use tools::conversation_tests;

/// actiongate's developer tools.
#[derive(Debug, Parser)]
#[command(name = "actiongate-dev", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run conversation tests (Rasa Pro's end-to-end format) against a running Rasa.
    Converse(ConverseCli),
    /// Replay the consent matrix and the reply corpus through the guard and a naive
    /// baseline; print the scores.
    Eval(EvalArgs),
}

#[derive(Debug, Clone, Args)]
struct ConverseCli {
    /// Conversation test files.
    #[arg(required = true)]
    files: Vec<PathBuf>,
    /// Rasa's base URL (run with --enable-api).
    #[arg(long)]
    rasa: String,
    /// Rasa's API token (`rasa run --auth-token`).
    #[arg(long, env = "RASA_AUTH_TOKEN", hide_env_values = true)]
    rasa_token: Option<String>,
    /// The subscription service's base URL, for steps that move its facts.
    #[arg(long)]
    service: Option<String>,
    /// Bearer token for the subscription service.
    #[arg(long, env = "ACTIONGATE_SUBSCRIPTIONS_TOKEN", hide_env_values = true)]
    service_token: Option<String>,
    /// Timeout of each HTTP request, in seconds.
    #[arg(long, default_value_t = 30)]
    timeout_secs: u64,
    #[command(flatten)]
    log: LogArgs,
}

#[derive(Debug, Clone, Args)]
struct EvalArgs {
    /// The matrix file (eval/consent-matrix.yml), or a reply corpus (eval/replies.yml).
    matrix: PathBuf,
    /// The reply corpus replayed after the matrix (default: replies.yml beside the matrix,
    /// when there is one).
    #[arg(long)]
    replies: Option<PathBuf>,
    /// Replay the part of the matrix that applies to Stripe against this Stripe API
    /// (localstripe: scripts/test-stripe.sh), each scenario's customers and subscriptions
    /// made afresh there; the key is read from STRIPE_API_KEY.
    #[arg(long)]
    stripe_api_base: Option<String>,
    #[command(flatten)]
    log: LogArgs,
}

#[tokio::main]
async fn main() -> ExitCode {
    actionserver::keep_freed_memory();
    match Cli::parse().command {
        Command::Eval(args) => {
            // The eval runs hundreds of in-process servers: their request logs only at -v.
            let log = &args.log;
            telemetry::init(
                log.verbose,
                log.quiet || log.verbose == 0,
                log.log_format,
                None,
            );
            match eval::run(&args).await {
                Ok(true) => ExitCode::SUCCESS,
                Ok(false) => ExitCode::FAILURE,
                Err(e) => {
                    eprintln!("error: {e}");
                    ExitCode::from(2)
                }
            }
        }
        Command::Converse(args) => {
            let log = &args.log;
            telemetry::init(log.verbose, log.quiet, log.log_format, None);
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
