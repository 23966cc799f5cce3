//! `actiongate-dev eval`: the consent matrix and the reply corpus, each replayed through a
//! fresh actiongate per scenario (in-process, loopback, port 0), with its own data
//! directory, SQLite store and embedded subscription service; or, with
//! `--stripe-api-base`, the part of the matrix that applies to Stripe, each scenario's
//! world made afresh in localstripe.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use clap::Parser;

use actiongate::app;
use actiongate::cli::Cli;

use super::EvalArgs;
use actiongate::config::Settings;
use tools::eval::{replies, Arena, EvalError, Running};

/// Replays what `args` names: a reply corpus alone, or the matrix and then the corpus
/// beside it (or `--replies`). `Ok(true)` when every file replayed scores as it must.
pub(crate) async fn run(args: &EvalArgs) -> Result<bool, EvalError> {
    let out = &mut std::io::stdout();
    if let Some(api) = &args.stripe_api_base {
        let key = std::env::var("STRIPE_API_KEY")
            .map_err(|_| EvalError::Start("--stripe-api-base needs STRIPE_API_KEY".into()))?;
        let arena = AtStripe {
            worlds: tools::eval::stripe::Worlds::new(api.trim_end_matches('/'), &key),
        };
        return tools::eval::eval(&args.matrix, &arena, out).await;
    }
    if replies::is_corpus(&args.matrix) {
        return replies::eval(&args.matrix, &Fresh, out).await;
    }
    let matrix = tools::eval::eval(&args.matrix, &Fresh, out).await?;
    let beside = args.matrix.with_file_name("replies.yml");
    let corpus = args
        .replies
        .clone()
        .or_else(|| beside.exists().then_some(beside));
    let corpus = match corpus {
        Some(path) => {
            println!();
            replies::eval(&path, &Fresh, out).await?
        }
        None => true,
    };
    Ok(matrix && corpus)
}

/// A fresh actiongate each time.
pub struct Fresh;

impl Arena for Fresh {
    async fn start(&self, confirm_slot: Option<&str>) -> Result<Running, EvalError> {
        let (server, embedded) = serve(&[], confirm_slot).await?;
        let service = embedded.expect("the eval runs the embedded service");
        Ok(Running {
            service: format!("http://127.0.0.1:{service}"),
            stripe: None,
            ..server
        })
    }
}

/// actiongate started on a data directory of its own with `flags` and `confirm_slot`,
/// its webhook served: as [`Running`] (its service and Stripe's world still to fill in),
/// and the embedded service's port, if it runs one.
async fn serve(
    flags: &[&str],
    confirm_slot: Option<&str>,
) -> Result<(Running, Option<u16>), EvalError> {
    let dir = DataDir::new()?;
    let mut settings = settings(&dir.0, flags)?;
    settings.consent.signals.confirm_slot = confirm_slot.map(str::to_owned);
    let started = app::start(&settings)
        .await
        .map_err(|e| EvalError::Start(e.to_string()))?;
    let http = started.http.expect("the webhook is served");
    let handle = http.handle();
    tokio::spawn(http);
    let store = started.store.clone();
    let running = Running {
        server: format!("http://127.0.0.1:{}", started.port),
        service: String::new(),
        handle,
        // The server's background first, then its data directory.
        keep: Box::new((started.background, dir)),
        close: Some(Box::pin(async move { store.close().await })),
        stripe: None,
    };
    Ok((running, started.embedded_port))
}

/// A fresh actiongate each time with `provider: stripe`, and a fresh world in localstripe
/// for it.
pub struct AtStripe {
    worlds: tools::eval::stripe::Worlds,
}

impl Arena for AtStripe {
    async fn start(&self, confirm_slot: Option<&str>) -> Result<Running, EvalError> {
        actiongate::telemetry::install_crypto();
        let world = self.worlds.take().await?;
        let flags = [
            "--subscriptions-provider",
            "stripe",
            "--stripe-api-base",
            &world.proxy.url,
        ];
        let (server, _) = serve(&flags, confirm_slot).await?;
        Ok(Running {
            service: world.api.clone(),
            stripe: Some(world),
            ..server
        })
    }

    fn applies(&self, scenario: &tools::eval::Scenario) -> bool {
        tools::eval::stripe::applies(scenario)
    }
}

/// A data directory removed when dropped.
struct DataDir(PathBuf);

impl DataDir {
    fn new() -> Result<Self, EvalError> {
        static N: AtomicU64 = AtomicU64::new(0);
        let dir = std::env::temp_dir().join(format!(
            "actiongate-eval-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir)
            .map_err(|e| EvalError::Read(dir.display().to_string(), e.to_string()))?;
        Ok(Self(dir))
    }
}

impl Drop for DataDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `serve`'s settings for one scenario: loopback, port 0, no endpoints file, one worker.
fn settings(dir: &Path, extra: &[&str]) -> Result<Settings, EvalError> {
    let endpoints = dir.join("endpoints.yml");
    std::fs::write(&endpoints, "")
        .map_err(|e| EvalError::Read(endpoints.display().to_string(), e.to_string()))?;
    let dir_text = dir.display().to_string();
    let endpoints_text = endpoints.display().to_string();
    let mut argv = vec![
        "actiongate",
        "--host",
        "127.0.0.1",
        "--port",
        "0",
        "--embedded-service-port",
        "0",
        "--quiet",
        "--data-dir",
        &dir_text,
        "--endpoints",
        &endpoints_text,
        "--rate-capacity",
        "100",
    ];
    argv.extend_from_slice(extra);
    let cli = Cli::parse_from(argv);
    let mut settings = Settings::resolve(&cli.serve)
        .map_err(|e| EvalError::Read("settings".into(), e.to_string()))?;
    settings.server.handle_signals = false;
    settings.server.workers = 1;
    Ok(settings)
}
