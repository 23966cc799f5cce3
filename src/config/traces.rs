//! endpoints.yml's `tracing:` as rasa-sdk reads it: `type: otlp` (`endpoint`, `insecure`,
//! `root_certificates`), `type: jaeger` (`host`, `port`, `username`, `password`, sent to
//! Jaeger's own OTLP receiver), `service_name`; as one mapping or a list of them.

use std::path::Path;

use actionserver::TraceExport;
use serde_yaml_ng::{Mapping, Value};

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

/// The `tracing:` section: `None` when it is absent; its `exports` empty when no entry
/// can be used. It is Rasa's
/// section (CONTRACT.md section 0), so nothing in it stops the server: an entry that cannot
/// be used (an unknown type, as rasa-sdk leaves it out; an `otlp` without `endpoint`; a CA
/// file this machine cannot read) is left out and noted, for the log at start and for
/// `actiongate check`. `var` reads the environment (`TRACING_SERVICE_NAME`).
pub fn read(
    section: Option<&Value>,
    file: &Path,
    var: &dyn Fn(&str) -> Option<String>,
) -> Option<TraceSettings> {
    let at = file.display();
    let mut notes = Vec::new();
    let entries: Vec<(String, &Mapping)> = match section {
        None | Some(Value::Null) => return None,
        Some(Value::Mapping(m)) => vec![("tracing".to_owned(), m)],
        Some(Value::Sequence(list)) => list
            .iter()
            .enumerate()
            .filter_map(|(i, v)| match v {
                Value::Mapping(m) => Some((format!("tracing[{i}]"), m)),
                _ => {
                    notes.push(format!("{at}: tracing[{i}]: not a mapping; left out"));
                    None
                }
            })
            .collect(),
        Some(_) => {
            notes.push(format!(
                "{at}: tracing: not a mapping (or a list of them); left out"
            ));
            Vec::new()
        }
    };
    let mut exports = Vec::new();
    let mut names = Vec::new();
    for (key, entry) in entries {
        let mut said = Vec::new();
        let read = export(&key, entry, &mut said);
        notes.extend(said.into_iter().map(|note| format!("{at}: {note}")));
        match read {
            Ok(Some(export)) => {
                if let Ok(Some(name)) = text(entry, "service_name") {
                    names.push(name);
                }
                exports.push(export);
            }
            Ok(None) => {}
            Err(why) => notes.push(format!("{at}: {key}: {why}; left out")),
        }
    }
    names.dedup();
    if names.len() > 1 {
        notes.push(format!(
            "{at}: tracing: one service name is used for every exporter: {}",
            names[0]
        ));
    }
    let service_name = names
        .into_iter()
        .next()
        .or_else(|| var("TRACING_SERVICE_NAME"))
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| DEFAULT_SERVICE_NAME.to_owned());
    Some(TraceSettings {
        service_name,
        exports,
        notes,
    })
}

/// One entry: where it exports, `None` for a type rasa-sdk does not know (noted).
fn export(
    key: &str,
    entry: &Mapping,
    notes: &mut Vec<String>,
) -> Result<Option<TraceExport>, String> {
    let text = |name: &str| text(entry, name).map_err(|r| format!("{name}: {r}"));
    match text("type")?.as_deref() {
        Some("otlp") => {
            let endpoint = text("endpoint")?
                .filter(|e| !e.is_empty())
                .ok_or("an otlp exporter needs an endpoint")?;
            if endpoint.trim_end_matches('/').ends_with(":4318") {
                notes.push(format!("{key}.endpoint: 4318 is OTLP/HTTP's port; spans are sent with OTLP over gRPC (4317), as rasa-sdk sends them"));
            }
            let flagged = flag(entry, "insecure").map_err(|r| format!("insecure: {r}"))?;
            // A scheme decides, as in OpenTelemetry's exporters; `insecure` is for an
            // endpoint without one (default false: TLS).
            let insecure = match endpoint.split_once("://").map(|(scheme, _)| scheme) {
                Some("http") => true,
                Some("https") => false,
                Some(other) => {
                    return Err(format!(
                        "endpoint: the scheme {other}:// is neither http nor https"
                    ))
                }
                None => flagged.unwrap_or(false),
            };
            if flagged.is_some_and(|f| f != insecure) {
                notes.push(format!(
                    "{key}.insecure: the endpoint's scheme decides: {}",
                    if insecure { "plain" } else { "TLS" }
                ));
            }
            let root_certificates = match text("root_certificates")? {
                None => None,
                Some(_) if insecure => {
                    notes.push(format!("{key}.root_certificates: not used, since the exporter is insecure (as rasa-sdk)"));
                    None
                }
                Some(path) => Some(pem(&path).map_err(|r| format!("root_certificates: {r}"))?),
            };
            Ok(Some(TraceExport {
                endpoint,
                insecure,
                root_certificates,
                basic_auth: None,
            }))
        }
        Some("jaeger") => {
            let host = text("host")?.unwrap_or_else(|| "localhost".to_owned());
            let port = match text("port")? {
                None => JAEGER_OTLP_PORT,
                Some(p) => {
                    let port: u16 = p.parse().map_err(|_| "port: expected a port number")?;
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
            Ok(Some(TraceExport {
                endpoint: format!("{host}:{port}"),
                insecure: true,
                root_certificates: None,
                basic_auth,
            }))
        }
        other => {
            notes.push(format!(
                "{key}: type {} is not a tracing backend rasa-sdk knows; left out",
                other.unwrap_or("(none)")
            ));
            Ok(None)
        }
    }
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

    fn parse(yaml: &str) -> Option<TraceSettings> {
        let value: Value = serde_yaml_ng::from_str(yaml).unwrap();
        read(value.get("tracing"), Path::new("e.yml"), &|_| None)
    }

    fn left_out(yaml: &str) -> bool {
        parse(yaml).is_some_and(|t| t.exports.is_empty() && !t.notes.is_empty())
    }

    #[test]
    fn otlp_as_rasa_writes_it() {
        let t = parse("tracing:\n  type: otlp\n  endpoint: collector:4317\n  insecure: true\n  service_name: my-actions\n").unwrap();
        assert_eq!(t.service_name, "my-actions");
        assert_eq!(t.exports.len(), 1);
        assert_eq!(t.exports[0].url(), "http://collector:4317");
        assert!(t.exports[0].insecure);
        // Secure by default, as rasa-sdk's exporter is.
        let t = parse("tracing:\n  type: otlp\n  endpoint: collector:4317\n").unwrap();
        assert_eq!(t.exports[0].url(), "https://collector:4317");
        assert!(!t.exports[0].insecure);
        assert_eq!(t.service_name, DEFAULT_SERVICE_NAME);
        // A replaced variable is text; "false" means false.
        let t = parse("tracing:\n  type: otlp\n  endpoint: c:4317\n  insecure: 'false'\n").unwrap();
        assert!(!t.exports[0].insecure);
        // The scheme decides; an `insecure` that disagrees is noted.
        let t = parse("tracing:\n  type: otlp\n  endpoint: https://c:4317\n  insecure: true\n")
            .unwrap();
        assert!(!t.exports[0].insecure);
        assert!(
            t.notes.iter().any(|n| n.contains("scheme decides")),
            "{:?}",
            t.notes
        );
        assert!(
            parse("tracing:\n  type: otlp\n  endpoint: http://c:4317\n")
                .unwrap()
                .exports[0]
                .insecure
        );
        // What cannot be used is left out, never a reason not to start.
        assert!(left_out("tracing:\n  type: otlp\n  insecure: true\n"));
        assert!(left_out(
            "tracing:\n  type: otlp\n  endpoint: c:1\n  insecure: maybe\n"
        ));
        assert!(left_out("tracing:\n  type: otlp\n  endpoint: ftp://c:1\n"));
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
        let t = parse(&yaml).unwrap();
        assert!(t.exports[0].root_certificates.is_some());
        let missing = "tracing:\n  - type: otlp\n    endpoint: c:4317\n    root_certificates: /nowhere/ca.pem\n  - type: jaeger\n";
        let t = parse(missing).unwrap();
        assert_eq!(t.exports.len(), 1, "the other entry still exports");
        assert!(
            t.notes
                .iter()
                .any(|n| n.contains("tracing[0]: root_certificates")),
            "{:?}",
            t.notes
        );
        std::fs::write(&ca, "not a certificate").unwrap();
        assert!(left_out(&yaml));
    }

    #[test]
    fn jaeger_goes_to_jaegers_otlp_port() {
        let t = parse("tracing:\n  type: jaeger\n  host: jaeger\n  port: 6831\n  username: u\n  password: p\n").unwrap();
        assert_eq!(t.exports[0].url(), "http://jaeger:4317");
        assert_eq!(t.exports[0].basic_auth, Some(("u".into(), "p".into())));
        assert!(
            t.notes.iter().any(|n| n.contains("Thrift")),
            "{:?}",
            t.notes
        );
        let t = parse("tracing:\n  type: jaeger\n").unwrap();
        assert_eq!(t.exports[0].url(), "http://localhost:4317");
        let t = parse("tracing:\n  type: jaeger\n  port: 14317\n").unwrap();
        assert_eq!(t.exports[0].url(), "http://localhost:14317");
    }

    #[test]
    fn a_list_exports_to_each_and_unknown_types_are_left_out() {
        let t = parse("tracing:\n  - type: jaeger\n    host: j\n  - type: otlp\n    endpoint: http://o:4317\n  - type: zipkin\n  - 3\n").unwrap();
        let urls: Vec<String> = t.exports.iter().map(TraceExport::url).collect();
        assert_eq!(urls, ["http://j:4317", "http://o:4317"]);
        assert!(
            t.notes.iter().any(|n| n.contains("zipkin")),
            "{:?}",
            t.notes
        );
        assert!(
            t.notes.iter().any(|n| n.contains("tracing[3]")),
            "{:?}",
            t.notes
        );
        let http = parse("tracing:\n  type: otlp\n  endpoint: http://otel:4318\n").unwrap();
        assert!(
            http.notes.iter().any(|n| n.contains("4318")),
            "{:?}",
            http.notes
        );
        assert!(left_out("tracing:\n  type: zipkin\n"));
        assert!(parse("nlg: {}\n").is_none());
        assert!(left_out("tracing: 3\n"));
    }

    #[test]
    fn the_service_name_falls_back_to_rasa_sdks_variable() {
        let value: Value = serde_yaml_ng::from_str("tracing:\n  type: jaeger\n").unwrap();
        let t = read(value.get("tracing"), Path::new("e.yml"), &|name| {
            (name == "TRACING_SERVICE_NAME").then(|| "from-env".to_owned())
        })
        .unwrap();
        assert_eq!(t.service_name, "from-env");
    }
}
