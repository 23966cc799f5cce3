//! Logging: `tracing` to stderr as text or JSON, at the level the flags choose. Message
//! text and slot values are logged only at debug level; colour only on a terminal. And
//! traces: the spans whose target ends in `::otel` (the action call, the guard's steps,
//! the calls to the subscription service), exported as endpoints.yml's `tracing:` says.

use std::ffi::OsString;
use std::io::IsTerminal;
use std::sync::Once;

use tracing_subscriber::filter::{filter_fn, FilterExt as _};
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;
use tracing_subscriber::{EnvFilter, Layer};

use crate::config::TraceSettings;

/// The target of the product's spans that are exported as traces.
pub const SPAN_TARGET: &str = "actiongate::otel";

/// The log format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

/// Starts logging, and exporting traces when `traces` says where. `verbosity`: 0 info,
/// 1 debug (`-v`), 2 trace (`-vv`); `quiet` shows only warnings and errors. `RUST_LOG`,
/// when set, wins. The spans made for traces stay out of the log. Call it inside the Tokio
/// runtime (the exporters' channels live there); keep what it returns and shut it down
/// before the process ends, so the last spans are sent.
pub fn init(
    verbosity: u8,
    quiet: bool,
    format: LogFormat,
    traces: Option<&TraceSettings>,
) -> Option<actionserver::Traces> {
    let level = match (quiet, verbosity) {
        (true, _) => "warn",
        (false, 0) => "info",
        (false, 1) => "debug",
        (false, _) => "trace",
    };
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| {
        EnvFilter::new(format!(
            "{level},sqlx=warn,actix_server=warn,hyper=warn,reqwest=warn,rustls=warn,h2=warn,tower=warn,opentelemetry=warn,opentelemetry_sdk=warn,opentelemetry_otlp=warn"
        ))
    });
    let ansi = colour(
        std::io::stderr().is_terminal(),
        std::env::var_os("NO_COLOR"),
    );
    let fmt = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(ansi);
    // The spans made for traces stay out of the log whatever RUST_LOG says: a line keeps
    // the request's span as its context.
    let untraced = filter_fn(|meta| !(meta.is_span() && meta.target().ends_with("::otel")));
    let log = match format {
        LogFormat::Text => fmt.boxed(),
        LogFormat::Json => fmt.json().flatten_event(true).boxed(),
    }
    .with_filter(filter.and(untraced));
    let traces = traces.filter(|t| !t.exports.is_empty() || !t.notes.is_empty());
    let built = traces
        .filter(|t| !t.exports.is_empty())
        .map(|t| actionserver::trace_layer(&t.service_name, &t.exports));
    // Without an exporter the subscriber has no layer for one at all: an absent layer
    // would still have every span's callsite ask the filters each time.
    let (handle, failed) = match built {
        Some(Ok((layer, handle))) => {
            let _ = tracing_subscriber::registry()
                .with(log)
                .with(layer)
                .try_init();
            (Some(handle), None)
        }
        other => {
            let _ = tracing_subscriber::registry().with(log).try_init();
            (None, other.and_then(Result::err))
        }
    };
    if let Some(e) = failed {
        tracing::warn!(error = %e, "no traces are exported");
    }
    if let Some(t) = traces {
        if handle.is_some() {
            let to: Vec<String> = t.exports.iter().map(|e| e.url()).collect();
            tracing::info!(service = %t.service_name, to = ?to, "exporting traces");
        }
        for note in &t.notes {
            tracing::warn!("{note}");
        }
    }
    handle
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

/// For a test that watches spans through a subscriber of its own (`set_default`): a bare
/// registry becomes every other thread's subscriber, once in the process. tracing keeps one
/// interest per callsite for the whole process, decided when a thread first reaches it, and
/// with one subscriber registered or none it asks that thread's own: a test thread with
/// none (`NoSubscriber`) would leave the span disabled everywhere, the watching test's
/// thread too. Call it before `set_default`.
#[cfg(test)]
pub(crate) fn spans_enabled_on_every_thread() {
    use tracing_subscriber::util::SubscriberInitExt as _;
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let _ = tracing_subscriber::registry().try_init();
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
