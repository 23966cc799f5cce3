//! endpoints.yml's `tracing:` as rasa-sdk reads it: `type: otlp` (`endpoint`, `insecure`,
//! `root_certificates`), `type: jaeger` (`host`, `port`, `username`, `password`, sent to
//! Jaeger's own OTLP receiver), `service_name`; as one mapping or a list of them.

use std::path::Path;

use actionserver::TraceExport;
use serde_yaml_ng::{Mapping, Value};

use super::ConfigError;

/// The service name spans are exported under when neither the section nor
/// `TRACING_SERVICE_NAME` (rasa-sdk's variable) names one.
pub const DEFAULT_SERVICE_NAME: &str = "actiongate";

/// Jaeger's OTLP/gRPC port, where a `jaeger` entry's spans go.
const JAEGER_OTLP_PORT: u16 = 4317;

/// Jaeger's Thrift ports (the agent's UDP 6831 and 6832, the collector's HTTP 14268),
/// which rasa-sdk's Jaeger exporter speaks; no maintained Rust exporter does.
const JAEGER_THRIFT_PORTS: [u16; 3] = [6831, 6832, 14268];

/// Where spans are exported, under which name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceSettings {
    pub service_name: String,
    pub exports: Vec<TraceExport>,
    /// What was read differently from rasa-sdk, or left out, for `check` and the log.
    pub notes: Vec<String>,
}

/// The `tracing:` section: `None` when it is absent or exports nowhere (an entry of an
/// unknown type is left out, as rasa-sdk leaves it, and noted). `var` reads the
/// environment (`TRACING_SERVICE_NAME`).
pub fn read(
    section: Option<&Value>,
    file: &Path,
    var: &dyn Fn(&str) -> Option<String>,
) -> Result<Option<TraceSettings>, ConfigError> {
    let entries: Vec<(String, &Mapping)> = match section {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Mapping(m)) => vec![("tracing".to_owned(), m)],
        Some(Value::Sequence(list)) => list
            .iter()
            .enumerate()
            .map(|(i, v)| match v {
                Value::Mapping(m) => Ok((format!("tracing[{i}]"), m)),
                _ => Err(ConfigError::new(
                    file,
                    format!("tracing[{i}]"),
                    "expected a mapping",
                )),
            })
            .collect::<Result<_, _>>()?,
        Some(_) => {
            return Err(ConfigError::new(
                file,
                "tracing",
                "expected a mapping (or a list of them)",
            ))
        }
    };
    let mut notes = Vec::new();
    let mut exports = Vec::new();
    let mut names = Vec::new();
    for (key, entry) in entries {
        let text = |name: &str| {
            text(entry, name).map_err(|r| ConfigError::new(file, format!("{key}.{name}"), r))
        };
        if let Some(name) = text("service_name")? {
            names.push(name);
        }
        match text("type")?.as_deref() {
            Some("otlp") => {
                let endpoint = text("endpoint")?.filter(|e| !e.is_empty()).ok_or_else(|| {
                    ConfigError::new(
                        file,
                        format!("{key}.endpoint"),
                        "an otlp exporter needs an endpoint",
                    )
                })?;
                if endpoint.trim_end_matches('/').ends_with(":4318") {
                    notes.push(format!("{key}.endpoint: 4318 is OTLP/HTTP's port; spans are sent with OTLP over gRPC (4317), as rasa-sdk sends them"));
                }
                let insecure = flag(entry, "insecure")
                    .map_err(|r| ConfigError::new(file, format!("{key}.insecure"), r))?
                    .unwrap_or_else(|| endpoint.starts_with("http://"));
                let root_certificates = match text("root_certificates")? {
                    None => None,
                    Some(_) if insecure => {
                        notes.push(format!("{key}.root_certificates: not used, since the exporter is insecure (as rasa-sdk)"));
                        None
                    }
                    Some(path) => Some(pem(&path).map_err(|r| {
                        ConfigError::new(file, format!("{key}.root_certificates"), r)
                    })?),
                };
                exports.push(TraceExport {
                    endpoint,
                    insecure,
                    root_certificates,
                    basic_auth: None,
                });
            }
            Some("jaeger") => {
                let host = text("host")?.unwrap_or_else(|| "localhost".to_owned());
                let port = match text("port")? {
                    None => JAEGER_OTLP_PORT,
                    Some(p) => {
                        let port: u16 = p.parse().map_err(|_| {
                            ConfigError::new(file, format!("{key}.port"), "expected a port number")
                        })?;
                        if JAEGER_THRIFT_PORTS.contains(&port) {
                            notes.push(format!(
                                "{key}: port {port} is Jaeger's Thrift port; spans go to Jaeger's OTLP port {JAEGER_OTLP_PORT} on {host}"
                            ));
                            JAEGER_OTLP_PORT
                        } else {
                            port
                        }
                    }
                };
                let basic_auth = match (text("username")?, text("password")?) {
                    (Some(user), password) => Some((user, password.unwrap_or_default())),
                    _ => None,
                };
                exports.push(TraceExport {
                    endpoint: format!("{host}:{port}"),
                    insecure: true,
                    root_certificates: None,
                    basic_auth,
                });
            }
            other => notes.push(format!(
                "{key}: type {} is not a tracing backend rasa-sdk knows; left out",
                other.unwrap_or("(none)")
            )),
        }
    }
    if exports.is_empty() {
        return Ok(None);
    }
    names.dedup();
    if names.len() > 1 {
        notes.push(format!(
            "tracing: one service name is used for every exporter: {}",
            names[0]
        ));
    }
    let service_name = names
        .into_iter()
        .next()
        .or_else(|| var("TRACING_SERVICE_NAME"))
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| DEFAULT_SERVICE_NAME.to_owned());
    Ok(Some(TraceSettings {
        service_name,
        exports,
        notes,
    }))
}

/// A key's value as text (a number is its digits); `None` when absent or null.
fn text(entry: &Mapping, name: &str) -> Result<Option<String>, String> {
    match entry.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(Value::Number(n)) => Ok(Some(n.to_string())),
        Some(Value::Bool(b)) => Ok(Some(b.to_string())),
        Some(_) => Err("expected text".to_owned()),
    }
}

/// A yes/no key. A `${VAR}` in it arrives as text (Rasa renders replaced values as
/// strings), so `"true"` and `"false"` are read as what they say, not as Python's
/// truthiness of a non-empty string.
fn flag(entry: &Mapping, name: &str) -> Result<Option<bool>, String> {
    match entry.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(Value::String(s)) => match s.to_ascii_lowercase().as_str() {
            "true" | "yes" | "on" | "1" => Ok(Some(true)),
            "false" | "no" | "off" | "0" | "" => Ok(Some(false)),
            _ => Err(format!("expected true or false, found {s:?}")),
        },
        Some(_) => Err("expected true or false".to_owned()),
    }
}

/// The CA file's PEM text: read now, so a wrong path stops the start, not the first export.
/// Relative to the working directory, as Rasa opens it.
fn pem(path: &str) -> Result<Vec<u8>, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("{path} cannot be read: {e}"))?;
    if !String::from_utf8_lossy(&bytes).contains("-----BEGIN CERTIFICATE-----") {
        return Err(format!("{path} holds no PEM certificate"));
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(yaml: &str) -> Result<Option<TraceSettings>, ConfigError> {
        let value: Value = serde_yaml_ng::from_str(yaml).unwrap();
        read(value.get("tracing"), Path::new("e.yml"), &|_| None)
    }

    #[test]
    fn otlp_as_rasa_writes_it() {
        let t = parse("tracing:\n  type: otlp\n  endpoint: collector:4317\n  insecure: true\n  service_name: my-actions\n")
            .unwrap()
            .unwrap();
        assert_eq!(t.service_name, "my-actions");
        assert_eq!(t.exports.len(), 1);
        assert_eq!(t.exports[0].url(), "http://collector:4317");
        assert!(t.exports[0].insecure);
        // Secure by default, as rasa-sdk's exporter is.
        let t = parse("tracing:\n  type: otlp\n  endpoint: collector:4317\n")
            .unwrap()
            .unwrap();
        assert_eq!(t.exports[0].url(), "https://collector:4317");
        assert_eq!(t.service_name, DEFAULT_SERVICE_NAME);
        // A replaced variable is text; "false" means false.
        let t = parse("tracing:\n  type: otlp\n  endpoint: http://c:4317\n  insecure: 'false'\n")
            .unwrap()
            .unwrap();
        assert!(!t.exports[0].insecure);
        let err = parse("tracing:\n  type: otlp\n  insecure: true\n").unwrap_err();
        assert_eq!(err.key, "tracing.endpoint", "{err}");
        let err =
            parse("tracing:\n  type: otlp\n  endpoint: c:1\n  insecure: maybe\n").unwrap_err();
        assert_eq!(err.key, "tracing.insecure", "{err}");
    }

    #[test]
    fn root_certificates_are_read_at_start() {
        let dir = tempfile::tempdir().unwrap();
        let ca = dir.path().join("ca.pem");
        std::fs::write(
            &ca,
            "-----BEGIN CERTIFICATE-----\nAA==\n-----END CERTIFICATE-----\n",
        )
        .unwrap();
        let yaml = format!(
            "tracing:\n  type: otlp\n  endpoint: c:4317\n  root_certificates: {}\n",
            ca.display()
        );
        let t = parse(&yaml).unwrap().unwrap();
        assert!(t.exports[0].root_certificates.is_some());
        let missing =
            "tracing:\n  type: otlp\n  endpoint: c:4317\n  root_certificates: /nowhere/ca.pem\n";
        let err = parse(missing).unwrap_err();
        assert_eq!(err.key, "tracing.root_certificates");
        std::fs::write(&ca, "not a certificate").unwrap();
        assert!(parse(&yaml).is_err());
    }

    #[test]
    fn jaeger_goes_to_jaegers_otlp_port() {
        let t = parse("tracing:\n  type: jaeger\n  host: jaeger\n  port: 6831\n  username: u\n  password: p\n")
            .unwrap()
            .unwrap();
        assert_eq!(t.exports[0].url(), "http://jaeger:4317");
        assert_eq!(t.exports[0].basic_auth, Some(("u".into(), "p".into())));
        assert!(
            t.notes.iter().any(|n| n.contains("Thrift")),
            "{:?}",
            t.notes
        );
        let t = parse("tracing:\n  type: jaeger\n").unwrap().unwrap();
        assert_eq!(t.exports[0].url(), "http://localhost:4317");
        let t = parse("tracing:\n  type: jaeger\n  port: 14317\n")
            .unwrap()
            .unwrap();
        assert_eq!(t.exports[0].url(), "http://localhost:14317");
    }

    #[test]
    fn a_list_exports_to_each_and_unknown_types_are_left_out() {
        let t = parse("tracing:\n  - type: jaeger\n    host: j\n  - type: otlp\n    endpoint: http://o:4317\n  - type: zipkin\n")
            .unwrap()
            .unwrap();
        let urls: Vec<String> = t.exports.iter().map(TraceExport::url).collect();
        assert_eq!(urls, ["http://j:4317", "http://o:4317"]);
        assert!(
            t.notes.iter().any(|n| n.contains("zipkin")),
            "{:?}",
            t.notes
        );
        let http = parse("tracing:\n  type: otlp\n  endpoint: http://otel:4318\n")
            .unwrap()
            .unwrap();
        assert!(
            http.notes.iter().any(|n| n.contains("4318")),
            "{:?}",
            http.notes
        );
        assert_eq!(parse("tracing:\n  type: zipkin\n").unwrap(), None);
        assert_eq!(parse("nlg: {}\n").unwrap(), None);
        assert!(parse("tracing: 3\n").is_err());
    }

    #[test]
    fn the_service_name_falls_back_to_rasa_sdks_variable() {
        let value: Value = serde_yaml_ng::from_str("tracing:\n  type: jaeger\n").unwrap();
        let t = read(value.get("tracing"), Path::new("e.yml"), &|name| {
            (name == "TRACING_SERVICE_NAME").then(|| "from-env".to_owned())
        })
        .unwrap()
        .unwrap();
        assert_eq!(t.service_name, "from-env");
    }
}
