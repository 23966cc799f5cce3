//! The unit tests of the settings: endpoints.yml read, merged and validated.

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
    assert_eq!(section.server.workers, 3);
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

#[test]
fn merge_keys_are_merged_as_rasas_reader_merges_them() {
    let args = crate::cli::Cli::default_serve_args();
    let text = "auth: &auth\n  token: s3cret\n  token_name: key\naction_endpoint:\n  <<: *auth\n  url: http://x/webhook\n";
    let file = read_endpoints(text, &|_| None, Path::new("e.yml")).unwrap();
    let endpoint = file.action_endpoint.as_ref().unwrap();
    assert_eq!(endpoint.token.as_deref(), Some("s3cret"));
    let settings = Settings::from_parts(&args, &file, Path::new("e.yml")).unwrap();
    assert_eq!(settings.server.auth_token.as_deref(), Some("s3cret"));
    assert_eq!(settings.server.token_name, "key");
    // A key of the endpoint's own comes before the merged one's.
    let text = "base: &base {token: merged}\naction_endpoint: {<<: *base, token: own}\n";
    let file = read_endpoints(text, &|_| None, Path::new("e.yml")).unwrap();
    assert_eq!(file.action_endpoint.unwrap().token.as_deref(), Some("own"));
    // Merged into our section too, and still strict there.
    let text = "c: &c {window_secs: 120}\nactiongate:\n  consent: {<<: *c}\n";
    let file = read_endpoints(text, &|_| None, Path::new("e.yml")).unwrap();
    let settings = Settings::from_parts(&args, &file, Path::new("e.yml")).unwrap();
    assert_eq!(settings.consent.window, std::time::Duration::from_secs(120));
    let text = "c: &c {windw_secs: 120}\nactiongate:\n  consent: {<<: *c}\n";
    let err = read_endpoints(text, &|_| None, Path::new("e.yml")).unwrap_err();
    assert!(err.reason.contains("windw_secs"), "{err}");
}

#[test]
fn a_signing_secret_key_with_nothing_after_it_is_refused() {
    let args = crate::cli::Cli::default_serve_args();
    for text in [
        "actiongate:\n  consent:\n    signing_secret:\n",
        "actiongate:\n  consent:\n    signing_secret: ~\n",
        "actiongate:\n  consent: {signing_secret: null}\n",
    ] {
        let file = read_endpoints(text, &|_| None, Path::new("e.yml")).unwrap();
        let err = Settings::from_parts(&args, &file, Path::new("e.yml")).unwrap_err();
        assert_eq!(
            err.key, "actiongate.consent.signing_secret",
            "{text}: {err}"
        );
    }
    // Left out, there is no signing (and that is the default).
    let file = read_endpoints(
        "actiongate:\n  consent: {}\n",
        &|_| None,
        Path::new("e.yml"),
    )
    .unwrap();
    let settings = Settings::from_parts(&args, &file, Path::new("e.yml")).unwrap();
    assert!(settings.consent.identity.signing_secret.is_none());
}

#[test]
fn an_empty_auth_token_flag_never_turns_the_files_token_off() {
    let mut args = crate::cli::Cli::default_serve_args();
    args.auth_token = Some(String::new());
    let file = read_endpoints(
        "action_endpoint:\n  url: http://x\n  token: s3cret\n",
        &|_| None,
        Path::new("e.yml"),
    )
    .unwrap();
    let err = Settings::from_parts(&args, &file, Path::new("e.yml")).unwrap_err();
    assert_eq!(err.key, "auth_token", "{err}");
    args.auth_token = Some("flag".into());
    let settings = Settings::from_parts(&args, &file, Path::new("e.yml")).unwrap();
    assert_eq!(settings.server.auth_token.as_deref(), Some("flag"));
}
