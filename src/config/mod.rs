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
mod tests {
    use super::*;

    fn load(text: &str) -> Result<Option<EndpointsFile>, ConfigError> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("endpoints.yml");
        std::fs::write(&path, text).unwrap();
        load_endpoints(&path, true)
    }

    #[test]
    fn a_misspelled_key_is_an_error_naming_it() {
        let err = load("actiongate:\n  consent:\n    windw_secs: 5\n").unwrap_err();
        assert!(err.reason.contains("windw_secs"), "{err}");
        assert_eq!(err.key, "actiongate.consent");
        // Outside our section a misspelling is Rasa's to judge: named, not refused.
        let file = load("action_endpoit:\n  url: http://x\n").unwrap().unwrap();
        assert_eq!(file.unknown_sections, vec!["action_endpoit".to_owned()]);
    }

    #[test]
    fn a_wrong_type_is_an_error_naming_the_key() {
        let err = load("actiongate:\n  rate_limit:\n    capacity: lots\n").unwrap_err();
        assert_eq!(err.key, "actiongate.rate_limit.capacity", "{err}");
    }

    #[test]
    fn events_need_their_secret_and_read_from_endpoints() {
        let args = crate::cli::Cli::default_serve_args();
        let file = load("actiongate:\n  events:\n    port: 5057\n")
            .unwrap()
            .unwrap();
        let err = Settings::from_parts(&args, &file, Path::new("e.yml")).unwrap_err();
        assert_eq!(err.key, "actiongate.events.secret", "{err}");
        let file =
            load("actiongate:\n  events:\n    port: 5057\n    secret: s\n    tolerance_secs: 60\n")
                .unwrap()
                .unwrap();
        let events = Settings::from_parts(&args, &file, Path::new("e.yml"))
            .unwrap()
            .events
            .unwrap();
        assert_eq!(
            (events.host.as_str(), events.port, events.secret.as_str()),
            ("127.0.0.1", 5057, "s")
        );
        assert_eq!(events.tolerance, std::time::Duration::from_secs(60));
        let none = load("actiongate: {}\n").unwrap().unwrap();
        assert!(Settings::from_parts(&args, &none, Path::new("e.yml"))
            .unwrap()
            .events
            .is_none());
    }

    #[test]
    fn rasa_sections_are_accepted() {
        let file = load("action_endpoint:\n  url: http://127.0.0.1:5055/webhook\n  token: s\ntracker_store:\n  type: sql\n")
            .unwrap()
            .unwrap();
        assert_eq!(file.action_endpoint.unwrap().token.as_deref(), Some("s"));
    }

    /// A Rasa Pro deployment's file: every section and key Rasa takes, `tracing` as a
    /// mapping and as a list, the token from the environment.
    const RASA_PRO: &str = r#"
action_endpoint:
  url: grpc://actions:5055
  token: ${ACTION_TOKEN}
  token_name: auth
  cafile: ca.pem
  ssl_client_cert: client.pem
  ssl_client_key: client.key
  params: {deployment: prod}
  headers: {X-Team: billing}
  basic_auth:
    username: rasa
    password: ${BASIC_PASSWORD}
  timeout: 10
  enable_selective_domain: true
  type: grpc
tracing:
  type: otlp
  endpoint: ${OTEL_ENDPOINT}
  insecure: false
  service_name: rasa
metrics:
  type: otlp
  endpoint: otel:4317
privacy:
  anonymization:
    rules: []
mcp_servers:
  - name: billing
    url: http://mcp:8080
a2a_server: {enabled: false}
tracker_store:
  type: sql
  dialect: postgresql
  url: db
  password: ${DB_PASSWORD}
lock_store: {type: redis, url: redis}
event_broker: {type: kafka, sasl_password: "${NOT_REPLACED_QUOTED}"}
model_groups:
  - id: gpt
    models: [{provider: openai, model: gpt-4o}]
actiongate:
  server:
    workers: ${WORKERS}
  console:
    port: ${ADMIN_PORT}
"#;

    fn env(name: &str) -> Option<String> {
        match name {
            "ACTION_TOKEN" => Some("12345".into()),
            "BASIC_PASSWORD" => Some("p: w#".into()),
            "OTEL_ENDPOINT" => Some("http://otel:4318".into()),
            "DB_PASSWORD" => Some("$ecret".into()),
            "WORKERS" => Some("3".into()),
            "ADMIN_PORT" => Some("5059".into()),
            _ => None,
        }
    }

    #[test]
    fn a_rasa_pro_file_is_read_as_rasa_reads_it() {
        let file = read_endpoints(RASA_PRO, &env, Path::new("e.yml")).unwrap();
        let endpoint = file.action_endpoint.as_ref().unwrap();
        // A token of digits is still the text Rasa sends.
        assert_eq!(endpoint.token.as_deref(), Some("12345"));
        assert_eq!(endpoint.token_name.as_deref(), Some("auth"));
        assert_eq!(
            file.tracing.as_ref().unwrap()["endpoint"],
            "http://otel:4318"
        );
        assert!(
            file.unknown_sections.is_empty(),
            "{:?}",
            file.unknown_sections
        );
        let section = file.actiongate.as_ref().unwrap();
        assert_eq!(section.server.as_ref().unwrap().workers, Some(3));
        let args = crate::cli::Cli::default_serve_args();
        let settings = Settings::from_parts(&args, &file, Path::new("e.yml")).unwrap();
        assert_eq!(settings.server.auth_token.as_deref(), Some("12345"));
        assert_eq!(settings.server.token_name, "auth");
        // As a list, tracing is Rasa's too.
        let listed = "tracing:\n  - type: jaeger\n    host: localhost\n  - type: otlp\n";
        assert!(read_endpoints(listed, &env, Path::new("e.yml"))
            .unwrap()
            .tracing
            .unwrap()
            .is_sequence());
    }

    #[test]
    fn an_unset_variable_is_refused_naming_it_as_rasa_refuses_it() {
        let err = read_endpoints(RASA_PRO, &|_| None, Path::new("e.yml")).unwrap_err();
        assert_eq!(err.key, "action_endpoint.token", "{err}");
        assert!(err.reason.contains("${ACTION_TOKEN}"), "{err}");
        // The literal text is never taken as the token.
        let quoted = "action_endpoint:\n  url: http://x\n  token: \"${ACTION_TOKEN}\"\n";
        let file = read_endpoints(quoted, &|_| None, Path::new("e.yml")).unwrap();
        // Quoted, Rasa does not replace it either: both read the same literal text, and
        // the server refuses to start on a token anyone can read off the template.
        assert_eq!(
            file.action_endpoint.as_ref().unwrap().token.as_deref(),
            Some("${ACTION_TOKEN}")
        );
        let args = crate::cli::Cli::default_serve_args();
        let err = Settings::from_parts(&args, &file, Path::new("e.yml")).unwrap_err();
        assert_eq!(err.key, "action_endpoint.token", "{err}");
    }

    #[test]
    fn our_section_stays_strict_when_the_rest_is_open() {
        let err = read_endpoints(
            "metrics: {type: otlp}\nactiongate:\n  server: {wokers: 2}\n",
            &env,
            Path::new("e.yml"),
        )
        .unwrap_err();
        assert!(err.reason.contains("wokers"), "{err}");
        let file = read_endpoints("actiongat:\n  server: {}\n", &env, Path::new("e.yml")).unwrap();
        assert_eq!(file.unknown_sections, vec!["actiongat".to_owned()]);
    }

    #[test]
    fn a_secret_left_unreplaced_or_empty_is_refused() {
        let args = crate::cli::Cli::default_serve_args();
        let refused = |text: &str, var: &dyn Fn(&str) -> Option<String>| {
            let file = read_endpoints(text, var, Path::new("e.yml")).unwrap();
            Settings::from_parts(&args, &file, Path::new("e.yml")).unwrap_err()
        };
        // Set but empty: Rasa would send no token, and none would be required.
        let err = refused(
            "action_endpoint:\n  url: http://x\n  token: ${ACTION_TOKEN}\n",
            &|_| Some(String::new()),
        );
        assert!(err.reason.contains("empty"), "{err}");
        // `$NAME` alone is not replaced by Rasa either.
        let err = refused(
            "action_endpoint:\n  url: http://x\n  token: $ACTION_TOKEN\n",
            &|_| Some("s".into()),
        );
        assert_eq!(err.key, "action_endpoint.token", "{err}");
        // Our own secrets, quoted.
        let err = refused(
            "actiongate:\n  events:\n    port: 5057\n    secret: \"${EVENTS_SECRET}\"\n",
            &|_| Some("s".into()),
        );
        assert_eq!(err.key, "actiongate.events.secret", "{err}");
        let err = refused(
            "actiongate:\n  subscriptions:\n    token: \"${SERVICE_TOKEN}\"\n",
            &|_| Some("s".into()),
        );
        assert_eq!(err.key, "actiongate.subscriptions.token", "{err}");
    }
}
