//! Settings from flags, the environment and `endpoints.yml`, validated once. The file is
//! the one Rasa reads, read as Rasa reads it (`${VAR}` replaced, every section of Rasa's
//! left alone: [`env`]); our keys live under `actiongate:`, where a misspelled key, a wrong
//! type or a dangling reference is an error naming the file, the key and the reason —
//! never silently ignored.

mod env;
mod flags;
mod sections;
mod settings;
mod stripe;
mod traces;

use std::path::Path;

use serde::Deserialize;

pub use sections::*;
pub use settings::{ConsoleSettings, EventSource, EventsSettings, GrpcMode, Settings};
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
    // Merge keys (`<<: *anchor`) are merged, as Rasa's YAML reader merges them: a token
    // merged in from an anchor is the token. A file without one is read from its text, so
    // an error names its line.
    let read: serde_yaml_ng::Value =
        serde_yaml_ng::from_str(&text).map_err(|e| yaml_error(path, &e))?;
    let mut merged = read.clone();
    merged.apply_merge().map_err(|e| yaml_error(path, &e))?;
    let mut file = if merged == read {
        serde_yaml_ng::from_str::<EndpointsFile>(&text)
    } else {
        EndpointsFile::deserialize(merged.clone())
    }
    .map_err(|e| yaml_error(path, &e))?;
    if let serde_yaml_ng::Value::Mapping(top) = merged {
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
mod precedence_tests;
#[cfg(test)]
mod tests;
