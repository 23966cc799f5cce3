//! Logging: `tracing` to stderr as text or JSON, at the level the flags choose. Message
//! text and slot values are logged only at debug level.

use std::sync::Once;

use tracing_subscriber::EnvFilter;

/// The log format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

/// Starts logging. `verbosity`: 0 info, 1 debug (`-v`), 2 trace (`-vv`); `quiet` shows
/// only warnings and errors. `RUST_LOG`, when set, wins.
pub fn init(verbosity: u8, quiet: bool, format: LogFormat) {
    let level = match (quiet, verbosity) {
        (true, _) => "warn",
        (false, 0) => "info",
        (false, 1) => "debug",
        (false, _) => "trace",
    };
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| {
        EnvFilter::new(format!(
            "{level},sqlx=warn,actix_server=warn,hyper=warn,reqwest=warn,rustls=warn"
        ))
    });
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
    };
}

/// Installs rustls' crypto provider (ring) once, for the server's TLS and the client.
pub fn install_crypto() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}
