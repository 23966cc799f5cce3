//! Logging: `tracing` to stderr as text or JSON, at the level the flags choose. Message
//! text and slot values are logged only at debug level; colour only on a terminal.

use std::ffi::OsString;
use std::io::IsTerminal;
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
        .with_writer(std::io::stderr)
        .with_ansi(colour(
            std::io::stderr().is_terminal(),
            std::env::var_os("NO_COLOR"),
        ));
    let _ = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
    };
}

/// Whether the text log is coloured: only on a terminal, since a file or journald would
/// keep the escape codes as text, and never when `NO_COLOR` is set and not empty
/// (no-color.org). Setting ANSI explicitly overrides tracing-subscriber's own `NO_COLOR`
/// check, so it is made here.
fn colour(stderr_is_terminal: bool, no_color: Option<OsString>) -> bool {
    stderr_is_terminal && no_color.is_none_or(|v| v.is_empty())
}

/// Installs rustls' crypto provider (ring) once, for the server's TLS and the client.
pub fn install_crypto() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

#[cfg(test)]
mod tests {
    use super::colour;

    #[test]
    fn colour_only_on_a_terminal_without_no_color() {
        assert!(colour(true, None));
        assert!(colour(true, Some("".into())), "an empty NO_COLOR is unset");
        assert!(!colour(true, Some("1".into())));
        assert!(!colour(false, None), "a file or a pipe gets no colour");
        assert!(!colour(false, Some("1".into())));
    }
}
