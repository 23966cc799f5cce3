//! Settings from flags, the environment and `endpoints.yml`, validated once. The file is
//! the one Rasa reads, read as Rasa reads it (`${VAR}` replaced, every section of Rasa's
//! left alone: [`env`]); our keys live under `actiongate:`, where a misspelled key, a wrong
//! type or a dangling reference is an error naming the file, the key and the reason —
//! never silently ignored.

mod env;
mod settings;
mod traces;

use std::path::{Path, PathBuf};

use serde::Deserialize;

pub use settings::{ConsoleSettings, GrpcMode, Settings};
pub use traces::TraceSettings;

/// A configuration problem: which file, which key, what is wrong.
#[derive(Debug, Clone, thiserror::Error, PartialEq)]
#[error("{file}: {key}: {reason}")]
pub struct ConfigError {
    pub file: String,
    pub key: String,
    pub reason: String,
}

impl ConfigError {
    pub fn new(file: impl AsRef<Path>, key: impl Into<String>, reason: impl Into<String>) -> Self {
        Self {
            file: file.as_ref().display().to_string(),
            key: key.into(),
            reason: reason.into(),
        }
    }
}

/// `endpoints.yml` as Rasa reads it (CONTRACT.md section 0): every section Rasa (open
/// source or Pro) has, or adds later, is accepted and left alone; only `actiongate:` is
/// ours, and strict. Sections that neither reads are named in `unknown_sections` (a
/// misspelled `actiongate:` would otherwise go unnoticed) and warned about, not refused.
#[derive(Debug, Default, Deserialize)]
pub struct EndpointsFile {
    #[serde(default)]
    pub action_endpoint: Option<ActionEndpoint>,
    #[serde(default)]
    pub tracing: Option<serde_yaml_ng::Value>,
    #[serde(default)]
    pub actiongate: Option<Section>,
    /// Top-level keys that are not a section Rasa is known to read, nor ours.
    #[serde(skip)]
    pub unknown_sections: Vec<String>,
}

/// The top-level sections of Rasa 3.x and Rasa Pro's `endpoints.yml` (and ours).
pub const KNOWN_SECTIONS: &[&str] = &[
    "action_endpoint",
    "actiongate",
    "nlg",
    "nlu",
    "models",
    "model_groups",
    "tracker_store",
    "lock_store",
    "event_broker",
    "tracing",
    "metrics",
    "vector_store",
    "contextual_response_rephraser",
    "privacy",
    "mcp_servers",
    "a2a_server",
    "llm",
    "embeddings",
    "flow_retrieval",
    "nlu_command_adapter",
    "interactive_learning",
    "silence_timeout",
];

/// Rasa's `action_endpoint` (its `EndpointConfig`: `url`, `params`, `headers`,
/// `basic_auth`, `token`, `token_name`, `cafile`, and any other key, which Rasa passes on).
/// Its `token`, when set, is the token this server requires; the rest is Rasa's.
#[derive(Debug, Default, Deserialize)]
pub struct ActionEndpoint {
    #[serde(default)]
    pub url: Option<String>,
    #[serde(default, deserialize_with = "scalar_text")]
    pub token: Option<String>,
    #[serde(default, deserialize_with = "scalar_text")]
    pub token_name: Option<String>,
}

/// A scalar as the text Rasa sends (a token of digits is still the token); null is none.
fn scalar_text<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    use serde_yaml_ng::Value;
    match Option::<Value>::deserialize(d)? {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(Value::Number(n)) => Ok(Some(n.to_string())),
        Some(Value::Bool(b)) => Ok(Some(if b { "True" } else { "False" }.to_owned())),
        Some(_) => Err(serde::de::Error::custom("expected text")),
    }
}

/// The `actiongate:` section.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Section {
    #[serde(default)]
    pub subscriptions: Option<SubscriptionsSection>,
    #[serde(default)]
    pub embedded_service: Option<EmbeddedSection>,
    #[serde(default)]
    pub database_url: Option<String>,
    #[serde(default)]
    pub data_dir: Option<PathBuf>,
    #[serde(default)]
    pub consent: Option<ConsentSection>,
    #[serde(default)]
    pub rate_limit: Option<RateLimitSection>,
    #[serde(default)]
    pub audit: Option<AuditSection>,
    #[serde(default)]
    pub server: Option<ServerSection>,
    #[serde(default)]
    pub events: Option<EventsSection>,
    #[serde(default)]
    pub approval: Option<ApprovalSection>,
    #[serde(default)]
    pub console: Option<ConsoleSection>,
}

/// The operator console: where it listens and who may sign in.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConsoleSection {
    #[serde(default)]
    pub port: Option<u16>,
    #[serde(default)]
    pub host: Option<String>,
    /// Operators, each with an argon2 password hash (`actiongate hash-password`).
    #[serde(default)]
    pub operators: Option<Vec<OperatorEntry>>,
    /// Minutes a sign-in lasts (default 480).
    #[serde(default)]
    pub session_minutes: Option<f64>,
    /// Names (`Host` values) the console answers to besides loopback and the address it is
    /// bound to, such as the name of a reverse proxy in front of it.
    #[serde(default)]
    pub hosts: Option<Vec<String>>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OperatorEntry {
    pub name: String,
    pub password_hash: String,
}

/// Which confirmed changes a person approves first (CONTRACT.md section 7).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApprovalSection {
    /// Change types always held.
    #[serde(default)]
    pub change_types: Option<Vec<String>>,
    /// Accounts whose changes are always held.
    #[serde(default)]
    pub accounts: Option<Vec<String>>,
    /// Hold the options the service marks `"review": true` (default true).
    #[serde(default)]
    pub review: Option<bool>,
    /// Hours a hold waits for a decision (default 24).
    #[serde(default)]
    pub expiry_hours: Option<f64>,
    /// Rasa's base URL, to tell the conversation the decision (trigger_intent).
    #[serde(default)]
    pub notify_rasa_url: Option<String>,
    #[serde(default)]
    pub notify_rasa_token: Option<String>,
    /// Open holds an account may have at once (default 5).
    #[serde(default)]
    pub max_open_per_account: Option<usize>,
    /// Open holds a subscription may have at once (default 1).
    #[serde(default)]
    pub max_open_per_subscription: Option<usize>,
}

/// The service's change events: where they are received and the secret they are signed
/// with.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EventsSection {
    #[serde(default)]
    pub port: Option<u16>,
    #[serde(default)]
    pub host: Option<String>,
    #[serde(default)]
    pub secret: Option<String>,
    #[serde(default)]
    pub tolerance_secs: Option<u64>,
}

/// Where the subscription service is. Without `url`, the embedded service runs.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SubscriptionsSection {
    #[serde(default)]
    pub url: Option<String>,
    #[serde(default)]
    pub timeout_secs: Option<f64>,
    #[serde(default)]
    pub token: Option<String>,
    #[serde(default)]
    pub max_in_flight: Option<usize>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EmbeddedSection {
    #[serde(default)]
    pub port: Option<u16>,
    #[serde(default)]
    pub seed: Option<PathBuf>,
    #[serde(default)]
    pub command_delay_ms: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConsentSection {
    #[serde(default)]
    pub confirm_response: Option<String>,
    #[serde(default)]
    pub window_secs: Option<u64>,
    /// Seconds a reply may be timestamped before the question (replicas' clocks).
    #[serde(default)]
    pub clock_skew_secs: Option<u64>,
    /// NLU intents whose reply means yes / no.
    #[serde(default)]
    pub affirm_intents: Option<Vec<String>>,
    #[serde(default)]
    pub deny_intents: Option<Vec<String>>,
    /// Rasa Pro CALM's boolean confirmation slot.
    #[serde(default)]
    pub confirm_slot: Option<String>,
    /// The least confidence at which a yes intent says yes (default 0.8).
    #[serde(default)]
    pub min_confidence: Option<f64>,
    /// Whether a typed yes must also be a plain yes in its own words (default true).
    #[serde(default)]
    pub plain_yes: Option<bool>,
    /// Words added to the plain yes's lists: `affirm`, `filler`, `refuse`.
    #[serde(default)]
    pub reply_words: Option<crate::consent::plain_yes::ExtraWords>,
    /// `template` (default) or `terms`.
    #[serde(default)]
    pub question: Option<crate::consent::QuestionCheck>,
    #[serde(default)]
    pub account_key: Option<String>,
    #[serde(default)]
    pub account_claim: Option<String>,
    #[serde(default)]
    pub signing_secret: Option<String>,
    /// The longest a signed account token may be valid for, in seconds (default 86400):
    /// its `exp` is required.
    #[serde(default)]
    pub token_max_age_secs: Option<u64>,
    /// How far the token's issuer's clock may be from ours, in seconds (default 60, as
    /// jsonwebtoken's validation has it): allowed past `exp`, before `nbf` and `iat`.
    #[serde(default)]
    pub token_leeway_secs: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RateLimitSection {
    #[serde(default)]
    pub capacity: Option<f64>,
    #[serde(default)]
    pub per_hour: Option<f64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuditSection {
    #[serde(default)]
    pub retention_days: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerSection {
    #[serde(default)]
    pub body_limit: Option<usize>,
    #[serde(default)]
    pub decompressed_limit: Option<usize>,
    #[serde(default)]
    pub body_budget: Option<usize>,
    #[serde(default)]
    pub token_name: Option<String>,
    #[serde(default)]
    pub workers: Option<usize>,
    /// Connections open at once from one address, on every listener (256).
    #[serde(default)]
    pub max_connections_per_peer: Option<usize>,
    /// Serve gRPC on the port instead of the HTTP webhook (`--grpc`).
    #[serde(default)]
    pub grpc: Option<bool>,
    /// Serve gRPC on this port as well (`--grpc-port`).
    #[serde(default)]
    pub grpc_port: Option<u16>,
    /// The CA of mutual TLS for gRPC (`--ssl-ca-file`).
    #[serde(default)]
    pub ssl_ca_file: Option<PathBuf>,
}

/// Reads `endpoints.yml`. A missing file is `Ok(None)` only when `required` is false (the
/// default path); a given path must exist.
pub fn load_endpoints(path: &Path, required: bool) -> Result<Option<EndpointsFile>, ConfigError> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && !required => return Ok(None),
        Err(e) => return Err(ConfigError::new(path, "-", format!("cannot be read: {e}"))),
    };
    read_endpoints(&text, &|name| std::env::var(name).ok(), path).map(Some)
}

/// Where `serve` exports traces: the `tracing:` section of its `endpoints.yml` alone, read
/// before logging starts (the rest is read, and any error reported, by [`Settings::resolve`]).
pub fn trace_settings(args: &crate::cli::ServeArgs) -> Result<Option<TraceSettings>, ConfigError> {
    let required = args.endpoints != Path::new("endpoints.yml");
    let Some(file) = load_endpoints(&args.endpoints, required)? else {
        return Ok(None);
    };
    Ok(traces::read(
        file.tracing.as_ref(),
        &args.endpoints,
        &|name| std::env::var(name).ok(),
    ))
}

/// The text of an `endpoints.yml`, its `${VAR}` replaced from `var` as Rasa replaces them.
pub fn read_endpoints(
    text: &str,
    var: &dyn Fn(&str) -> Option<String>,
    path: &Path,
) -> Result<EndpointsFile, ConfigError> {
    if text.trim().is_empty() {
        return Ok(EndpointsFile::default());
    }
    let text = env::substitute(text, var)
        .map_err(|unset| ConfigError::new(path, unset.key.clone(), unset.to_string()))?;
    let mut file =
        serde_yaml_ng::from_str::<EndpointsFile>(&text).map_err(|e| yaml_error(path, &e))?;
    if let Ok(serde_yaml_ng::Value::Mapping(top)) = serde_yaml_ng::from_str(&text) {
        file.unknown_sections = top
            .keys()
            .map(|k| match k {
                serde_yaml_ng::Value::String(s) => s.clone(),
                other => serde_yaml_ng::to_string(other)
                    .unwrap_or_default()
                    .trim()
                    .to_owned(),
            })
            .filter(|k| !KNOWN_SECTIONS.contains(&k.as_str()))
            .collect();
    }
    Ok(file)
}

/// Turns a YAML error into file, key and reason.
pub fn yaml_error(path: &Path, e: &serde_yaml_ng::Error) -> ConfigError {
    let message = e.to_string();
    // serde_yaml_ng writes "path.to.key: reason at line L column C" when it knows the key.
    let (key, reason) = match message.split_once(": ") {
        Some((key, reason)) if !key.contains(' ') => (key.to_owned(), reason.to_owned()),
        _ => ("-".to_owned(), message.clone()),
    };
    ConfigError::new(path, key, reason)
}

#[cfg(test)]
mod tests;
