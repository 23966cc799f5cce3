//! The order of the settings' sources: flags (and their environment variables), then
//! endpoints.yml, then the defaults, key by key.

use super::*;

fn load(text: &str) -> Result<Option<EndpointsFile>, ConfigError> {
    read_endpoints(text, &|_| None, Path::new("e.yml")).map(Some)
}

/// The serve flags, parsed as `actiongate serve` parses them.
fn serve_args(flags: &[&str]) -> crate::cli::ServeArgs {
    #[derive(clap::Parser)]
    struct Serve {
        #[command(flatten)]
        args: crate::cli::ServeArgs,
    }
    let argv = std::iter::once("serve").chain(flags.iter().copied());
    <Serve as clap::Parser>::try_parse_from(argv).unwrap().args
}

/// Every flag comes before the endpoints.yml key it stands for, the key before the
/// default; a flag left unset leaves the key's value.
#[test]
fn flags_come_before_the_file_and_the_file_before_the_defaults() {
    use std::time::Duration;
    let file = load(
        "actiongate:
  data_dir: /file
  database_url: sqlite:/file/a.db
  subscriptions: {url: 'http://file', token: file, timeout_secs: 7, max_in_flight: 7}
  embedded_service: {port: 7001, command_delay_ms: 7}
  server: {body_limit: 7000, decompressed_limit: 7000, body_budget: 7000, token_name: file,
           workers: 7, grpc_port: 7002, ssl_ca_file: /file/ca.pem}
  consent: {window_secs: 7, clock_skew_secs: 7, confirm_slot: file, min_confidence: 0.7,
            plain_yes: false, question: terms, signing_secret: file, account_key: file}
  rate_limit: {capacity: 7, per_hour: 7}
  audit: {retention_days: 7}
  events: {port: 7003, host: 10.0.0.7, secret: file, tolerance_secs: 7}
  console: {port: 7004, host: 10.0.0.7}
",
    )
    .unwrap()
    .unwrap();
    let flags = serve_args(&[
        "--data-dir=/flag",
        "--database-url=sqlite:/flag/a.db",
        "--subscriptions-url=http://flag",
        "--subscriptions-token=flag",
        "--subscriptions-timeout=9",
        "--subscriptions-max-in-flight=9",
        "--embedded-service-port=9001",
        "--embedded-command-delay-ms=9",
        "--body-limit=9000",
        "--decompressed-limit=9000",
        "--body-budget=9000",
        "--token-name=flag",
        "--workers=9",
        "--grpc-port=9002",
        "--ssl-certificate=/flag/cert.pem",
        "--ssl-keyfile=/flag/key.pem",
        "--ssl-ca-file=/flag/ca.pem",
        "--confirmation-window=9",
        "--clock-skew=9",
        "--confirm-slot=flag",
        "--min-confidence=0.9",
        "--plain-yes=true",
        "--consent-question=template",
        "--signing-secret=flag",
        "--account-key=flag",
        "--rate-capacity=9",
        "--rate-per-hour=9",
        "--audit-retention-days=9",
        "--events-port=9003",
        "--events-host=10.0.0.9",
        "--events-secret=flag",
        "--events-tolerance=9",
        "--admin-port=9004",
        "--admin-host=10.0.0.9",
    ]);
    let (path, none) = (Path::new("e.yml"), serve_args(&[]));
    let (f, k, d) = (
        Settings::from_parts(&flags, &file, path).unwrap(),
        Settings::from_parts(&none, &file, path).unwrap(),
        Settings::from_parts(&none, &EndpointsFile::default(), path).unwrap(),
    );
    type Read = fn(&Settings) -> String;
    let each: &[(&str, Read, [&str; 3])] = &[
        (
            "data_dir",
            |s| s.data_dir.display().to_string(),
            ["/flag", "/file", "var"],
        ),
        (
            "database_url",
            |s| s.database_url.clone(),
            [
                "sqlite:/flag/a.db",
                "sqlite:/file/a.db",
                "sqlite:var/actiongate.db",
            ],
        ),
        (
            "subscriptions.url",
            |s| format!("{:?}", s.subscriptions_url),
            ["Some(\"http://flag\")", "Some(\"http://file\")", "None"],
        ),
        (
            "subscriptions.token",
            |s| format!("{:?}", s.subscriptions_token),
            ["Some(\"flag\")", "Some(\"file\")", "None"],
        ),
        (
            "subscriptions.timeout_secs",
            |s| s.subscriptions_timeout.as_secs().to_string(),
            ["9", "7", "5"],
        ),
        (
            "subscriptions.max_in_flight",
            |s| s.subscriptions_max_in_flight.to_string(),
            ["9", "7", "64"],
        ),
        (
            "embedded_service.port",
            |s| s.embedded_port.to_string(),
            ["9001", "7001", "5056"],
        ),
        (
            "embedded_service.command_delay_ms",
            |s| s.embedded_command_delay.as_millis().to_string(),
            ["9", "7", "0"],
        ),
        (
            "server.body_limit",
            |s| s.server.limits.max_body.to_string(),
            ["9000", "7000", "67108864"],
        ),
        (
            "server.decompressed_limit",
            |s| s.server.limits.max_decompressed.to_string(),
            ["9000", "7000", "268435456"],
        ),
        (
            "server.body_budget",
            |s| s.server.body_budget.to_string(),
            ["9000", "7000", "1073741824"],
        ),
        (
            "server.token_name",
            |s| s.server.token_name.clone(),
            ["flag", "file", "token"],
        ),
        (
            "server.workers",
            |s| s.server.workers.to_string(),
            ["9", "7", "0"],
        ),
        (
            "server.grpc_port",
            |s| format!("{:?}", s.grpc),
            ["Beside(9002)", "Beside(7002)", "Off"],
        ),
        (
            "server.ssl_ca_file",
            |s| format!("{:?}", s.grpc_client_ca),
            ["Some(\"/flag/ca.pem\")", "Some(\"/file/ca.pem\")", "None"],
        ),
        (
            "consent.window_secs",
            |s| s.consent.window.as_secs().to_string(),
            ["9", "7", "600"],
        ),
        (
            "consent.clock_skew_secs",
            |s| s.consent.clock_skew.as_secs().to_string(),
            ["9", "7", "5"],
        ),
        (
            "consent.confirm_slot",
            |s| format!("{:?}", s.consent.signals.confirm_slot),
            ["Some(\"flag\")", "Some(\"file\")", "None"],
        ),
        (
            "consent.min_confidence",
            |s| s.consent.signals.min_confidence.to_string(),
            ["0.9", "0.7", "0.8"],
        ),
        (
            "consent.plain_yes",
            |s| s.consent.plain_yes.to_string(),
            ["true", "false", "true"],
        ),
        (
            "consent.question",
            |s| format!("{:?}", s.consent.question),
            ["Template", "Terms", "Template"],
        ),
        (
            "consent.signing_secret",
            |s| format!("{:?}", s.consent.identity.signing_secret),
            ["Some(\"flag\")", "Some(\"file\")", "None"],
        ),
        (
            "consent.account_key",
            |s| s.consent.identity.account_key.clone(),
            ["flag", "file", "account_id"],
        ),
        (
            "rate_limit.capacity",
            |s| s.consent.rate.capacity.to_string(),
            ["9", "7", "5"],
        ),
        (
            "rate_limit.per_hour",
            |s| (s.consent.rate.per_second * 3600.0).round().to_string(),
            ["9", "7", "5"],
        ),
        (
            "audit.retention_days",
            |s| (s.audit_retention.as_secs() / 86_400).to_string(),
            ["9", "7", "90"],
        ),
        (
            "events",
            |s| {
                format!(
                    "{:?}",
                    s.events
                        .as_ref()
                        .map(|e| (&e.host, e.port, &e.secret, e.tolerance.as_secs()))
                )
            },
            [
                "Some((\"10.0.0.9\", 9003, \"flag\", 9))",
                "Some((\"10.0.0.7\", 7003, \"file\", 7))",
                "None",
            ],
        ),
        (
            "console",
            |s| format!("{:?}", s.console.as_ref().map(|c| (&c.host, c.port))),
            [
                "Some((\"10.0.0.9\", 9004))",
                "Some((\"10.0.0.7\", 7004))",
                "None",
            ],
        ),
    ];
    for (key, read, [flag, in_file, default]) in each {
        assert_eq!(read(&f), *flag, "{key}: the flag");
        assert_eq!(read(&k), *in_file, "{key}: the file");
        assert_eq!(read(&d), *default, "{key}: the default");
    }
    // --grpc (no value) over the file's grpc: false; and `server.grpc: true` alone.
    let grpc = load("actiongate:\n  server: {grpc: false}\n")
        .unwrap()
        .unwrap();
    let on = Settings::from_parts(&serve_args(&["--grpc"]), &grpc, path).unwrap();
    assert_eq!(on.grpc, GrpcMode::Only);
    let grpc = load("actiongate:\n  server: {grpc: true}\n")
        .unwrap()
        .unwrap();
    assert_eq!(
        Settings::from_parts(&none, &grpc, path).unwrap().grpc,
        GrpcMode::Only
    );
    assert_eq!(f.consent.rate.capacity, 9.0);
    assert_eq!(d.consent.window, Duration::from_secs(600));
}

/// A section or a list written with nothing under it is the default, as before.
#[test]
fn an_empty_section_is_the_default() {
    let file = load("actiongate:\n  consent:\n  console:\n  approval:\n    accounts:\n")
        .unwrap()
        .unwrap();
    let settings = Settings::from_parts(&serve_args(&[]), &file, Path::new("e.yml")).unwrap();
    assert_eq!(settings.consent.window.as_secs(), 600);
    assert!(settings.consent.approval.accounts.is_empty());
}

/// The provider's flags come before the file's keys, and choose the revision format.
#[test]
fn the_provider_flags_come_before_the_file() {
    use crate::subscriptions::model::RevisionFormat;
    let file = load(
        "actiongate:\n  subscriptions: {provider: stripe, api_key: sk_file, api_base: 'http://file'}\n",
    )
    .unwrap()
    .unwrap();
    let path = Path::new("e.yml");
    let read = |flags: &[&str], file: &EndpointsFile| {
        let s = Settings::from_parts(&serve_args(flags), file, path).unwrap();
        (s.stripe.map(|s| s.api_base), s.consent.revision_format)
    };
    assert_eq!(
        read(&["--stripe-api-base=http://flag"], &file),
        (Some("http://flag".into()), RevisionFormat::Fingerprint)
    );
    assert_eq!(
        read(&[], &file),
        (Some("http://file".into()), RevisionFormat::Fingerprint)
    );
    assert_eq!(
        read(&["--subscriptions-provider=service"], &file),
        (None, RevisionFormat::Decimal)
    );
    assert_eq!(
        read(&[], &EndpointsFile::default()),
        (None, RevisionFormat::Decimal)
    );
}

/// Stripe's webhook secret: the flag before the file; with `provider: stripe` the events
/// port takes Stripe's webhooks, and each half without the other is refused by its key.
#[test]
fn stripes_webhooks_take_the_events_port_with_the_endpoints_secret() {
    use crate::config::EventSource;
    let path = Path::new("e.yml");
    let file = |extra: &str| {
        load(&format!(
            "actiongate:\n  subscriptions: {{provider: stripe, api_key: sk_file{extra}}}\n  events: {{port: 7003}}\n"
        ))
        .unwrap()
        .unwrap()
    };
    let events = |flags: &[&str], file: &EndpointsFile| {
        Settings::from_parts(&serve_args(flags), file, path)
            .map(|s| s.events.map(|e| (e.source, e.secret)))
            .map_err(|e| e.key)
    };
    let with_secret = file(", webhook_secret: whsec_file");
    let window = |secs: u64| {
        Settings::from_parts(
            &serve_args(&[&format!("--confirmation-window={secs}")]),
            &with_secret,
            path,
        )
        .map(|s| s.consent.window.as_secs())
        .map_err(|e| e.key)
    };
    assert_eq!(window(86_400), Ok(86_400));
    assert_eq!(
        window(86_401),
        Err("actiongate.consent.window_secs".to_owned()),
        "an unknown outcome is sent again only while Stripe keeps the key's answer"
    );
    assert_eq!(
        events(&[], &with_secret),
        Ok(Some((EventSource::Stripe, "whsec_file".to_owned())))
    );
    assert_eq!(
        events(&["--stripe-webhook-secret=whsec_flag"], &with_secret),
        Ok(Some((EventSource::Stripe, "whsec_flag".to_owned())))
    );
    assert_eq!(
        events(&[], &file("")),
        Err("actiongate.subscriptions.webhook_secret".to_owned()),
        "a port without the secret"
    );
    assert_eq!(
        events(&["--events-secret=service"], &with_secret),
        Err("actiongate.events.secret".to_owned()),
        "the service's secret is not Stripe's"
    );
    let no_port = load(
        "actiongate:\n  subscriptions: {provider: stripe, api_key: sk_file, webhook_secret: whsec_file}\n",
    )
    .unwrap()
    .unwrap();
    assert_eq!(
        events(&[], &no_port),
        Err("actiongate.events.port".to_owned()),
        "a secret without the port"
    );
    let service = load("actiongate:\n  events: {port: 7003, secret: s}\n")
        .unwrap()
        .unwrap();
    assert_eq!(
        events(&[], &service),
        Ok(Some((EventSource::Service, "s".to_owned())))
    );
}
