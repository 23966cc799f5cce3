//! `actiongate check` as a user runs it: the project's own files pass; a misspelled key, a
//! wrong type, a dangling reference, a question missing a term, or model-settable change
//! memory each make it exit non-zero, naming the file, the key and the reason.

use std::path::Path;
use std::process::Command;

fn project_copy() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    for file in [
        "endpoints.yml",
        "responses/subscription_change.yml",
        "skills/subscription_change/skill.md",
        "skills/subscription_change/memory.yml",
    ] {
        let to = dir.path().join(file);
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        std::fs::copy(root.join(file), to).unwrap();
    }
    dir
}

/// `actiongate check` on a project folder: success, and what it wrote to stderr.
fn check(dir: &Path) -> (bool, String) {
    let (ok, _, stderr) = check_out(dir);
    (ok, stderr)
}

fn edit(dir: &Path, file: &str, from: &str, to: &str) {
    let path = dir.join(file);
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.contains(from), "{file} lacks {from:?}");
    std::fs::write(path, text.replacen(from, to, 1)).unwrap();
}

#[test]
fn the_projects_own_files_pass() {
    let dir = project_copy();
    let (ok, stderr) = check(dir.path());
    assert!(ok, "{stderr}");
}

#[test]
fn a_misspelled_or_mistyped_endpoints_key_fails() {
    let dir = project_copy();
    std::fs::write(
        dir.path().join("endpoints.yml"),
        "action_endpoint:\n  url: http://x/webhook\nactiongate:\n  consent:\n    window_sec: 60\n",
    )
    .unwrap();
    let (ok, stderr) = check(dir.path());
    assert!(!ok);
    assert!(
        stderr.contains("endpoints.yml: actiongate.consent: unknown field `window_sec`"),
        "{stderr}"
    );
    std::fs::write(
        dir.path().join("endpoints.yml"),
        "actiongate:\n  rate_limit:\n    capacity: many\n",
    )
    .unwrap();
    let (ok, stderr) = check(dir.path());
    assert!(
        !ok && stderr.contains("actiongate.rate_limit.capacity"),
        "{stderr}"
    );
    std::fs::write(
        dir.path().join("endpoints.yml"),
        "actiongate:\n  embedded_service:\n    seed: /no/such/file.json\n",
    )
    .unwrap();
    let (ok, stderr) = check(dir.path());
    assert!(
        !ok && stderr.contains("actiongate.embedded_service.seed"),
        "{stderr}"
    );
    std::fs::write(
        dir.path().join("endpoints.yml"),
        "actiongate:\n  server:\n    body_limit: 2048\n    body_budget: 1024\n",
    )
    .unwrap();
    let (ok, stderr) = check(dir.path());
    assert!(
        !ok && stderr.contains("actiongate.server.body_budget: must be at least the body limit"),
        "{stderr}"
    );
    std::fs::write(
        dir.path().join("endpoints.yml"),
        "actiongate:\n  subscriptions:\n    max_in_flight: 0\n",
    )
    .unwrap();
    let (ok, stderr) = check(dir.path());
    assert!(
        !ok && stderr.contains("actiongate.subscriptions.max_in_flight: must be at least 1"),
        "{stderr}"
    );
}

#[test]
fn a_question_without_every_term_fails() {
    let dir = project_copy();
    edit(
        dir.path(),
        "responses/subscription_change.yml",
        "It takes effect {change_effective}.",
        "It takes effect soon.",
    );
    let (ok, stderr) = check(dir.path());
    assert!(!ok && stderr.contains("{change_effective}"), "{stderr}");
}

#[test]
fn model_settable_change_memory_fails() {
    let dir = project_copy();
    edit(
        dir.path(),
        "skills/subscription_change/memory.yml",
        "    change_tag:\n      type: text\n      llm_settable: false",
        "    change_tag:\n      type: text\n      llm_settable: true",
    );
    let (ok, stderr) = check(dir.path());
    assert!(
        !ok && stderr.contains("change_tag") && stderr.contains("llm_settable"),
        "{stderr}"
    );
}

#[test]
fn dangling_tools_and_responses_and_misspelled_constraints_fail() {
    let dir = project_copy();
    edit(
        dir.path(),
        "skills/subscription_change/skill.md",
        "utter_for_confirmation: utter_confirm_subscription_change",
        "utter_for_confirmation: utter_confirm_subscription_chnage",
    );
    let (ok, stderr) = check(dir.path());
    assert!(
        !ok && stderr.contains("utter_confirm_subscription_chnage"),
        "{stderr}"
    );
    let dir = project_copy();
    edit(
        dir.path(),
        "skills/subscription_change/skill.md",
        "  - apply_subscription_change:\n      requires:",
        "  - apply_subscription_chnge:\n      requires:",
    );
    let (ok, stderr) = check(dir.path());
    assert!(
        !ok && stderr.contains("apply_subscription_chnge: no such tool"),
        "{stderr}"
    );
    let dir = project_copy();
    edit(
        dir.path(),
        "skills/subscription_change/skill.md",
        "requires_confirmation:",
        "require_confirmation:",
    );
    let (ok, stderr) = check(dir.path());
    assert!(!ok && stderr.contains("require_confirmation"), "{stderr}");
}

#[test]
fn serve_refuses_a_bad_configuration() {
    let dir = tempfile::tempdir().unwrap();
    let endpoints = dir.path().join("endpoints.yml");
    std::fs::write(&endpoints, "actiongate:\n  databse_url: sqlite:x.db\n").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_actiongate"))
        .args(["serve", "--port", "0", "--endpoints"])
        .arg(&endpoints)
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("databse_url"));
}

/// A certificate or key that cannot be read stops `serve` before anything starts, naming
/// the file: a missing certificate, and a key file holding no key.
#[test]
fn serve_refuses_a_certificate_or_key_it_cannot_read_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let cert = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
    let (cert_path, key_path) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
    std::fs::write(&cert_path, cert.cert.pem()).unwrap();
    std::fs::write(&key_path, "not a key\n").unwrap();
    let missing = dir.path().join("missing.pem");
    for (certificate, key, named) in [
        (&missing, &key_path, &missing),
        (&cert_path, &key_path, &key_path),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_actiongate"))
            .args(["serve", "--port", "0", "--data-dir"])
            .arg(dir.path())
            .arg("--ssl-certificate")
            .arg(certificate)
            .arg("--ssl-keyfile")
            .arg(key)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{stderr}");
        assert!(stderr.contains(named.to_str().unwrap()), "{stderr}");
        // Read before anything starts: no store and no embedded service was opened.
        for made in ["actiongate.db", "subscriptions.db"] {
            assert!(!dir.path().join(made).exists(), "{made} was made");
        }
    }
}

/// `actiongate serve` on `endpoints` (in `dir`, with `args` and one environment variable
/// set), expected to refuse to start: its error output.
fn serve_refused(dir: &Path, endpoints: &str, args: &[&str], env: Option<(&str, &str)>) -> String {
    let file = dir.join("endpoints.yml");
    std::fs::write(&file, endpoints).unwrap();
    let mut command = Command::new(env!("CARGO_BIN_EXE_actiongate"));
    command
        .args([
            "serve",
            "--port",
            "0",
            "--embedded-service-port",
            "0",
            "--data-dir",
        ])
        .arg(dir)
        .arg("--endpoints")
        .arg(&file)
        .args(args);
    if let Some((name, value)) = env {
        command.env(name, value);
    }
    let out = command.output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        !out.status.success(),
        "{endpoints:?} {args:?} {env:?} started: {stderr}"
    );
    stderr
}

/// A signing secret that is set but empty would trust unsigned account ids: refused, in
/// the environment and in endpoints.yml (CONTRACT.md section 2).
#[test]
fn serve_refuses_an_empty_signing_secret() {
    let dir = tempfile::tempdir().unwrap();
    for (file, env) in [
        ("actiongate:\n  consent: {signing_secret: \"\"}\n", None),
        ("actiongate:\n  consent:\n    signing_secret:\n", None),
        ("", Some(("ACTIONGATE_SIGNING_SECRET", ""))),
    ] {
        let stderr = serve_refused(dir.path(), file, &[], env);
        assert!(
            stderr.contains("signing secret is set but empty"),
            "{stderr}"
        );
    }
}

/// An auth token that is set but empty (a variable that was not exported) would turn
/// authentication off, even over endpoints.yml's token: refused.
#[test]
fn serve_refuses_an_empty_auth_token() {
    let dir = tempfile::tempdir().unwrap();
    let file = "action_endpoint:\n  url: http://x\n  token: s3cret\n";
    for (args, env) in [
        (&["--auth-token", ""][..], None),
        (&[][..], Some(("ACTIONGATE_AUTH_TOKEN", ""))),
    ] {
        let stderr = serve_refused(dir.path(), file, args, env);
        assert!(
            stderr.contains("auth_token") && stderr.contains("empty"),
            "{stderr}"
        );
    }
}

#[test]
fn the_log_has_no_colour_codes_when_stderr_is_not_a_terminal() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_actiongate"))
        .args(["subscription-service", "--port", "0", "--data-dir"])
        .arg(dir.path())
        // Colour must be off because stderr is a pipe, not because NO_COLOR says so.
        .env_remove("NO_COLOR")
        .env_remove("RUST_LOG")
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let (lines, received) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stderr).lines() {
            if lines.send(line.unwrap()).is_err() {
                break;
            }
        }
    });
    let mut log = String::new();
    let listening = loop {
        match received.recv_timeout(std::time::Duration::from_secs(30)) {
            Ok(line) => {
                log.push_str(&line);
                log.push('\n');
                if line.contains("listening") {
                    break true;
                }
            }
            Err(_) => break false,
        }
    };
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(listening, "the service never said it was listening:\n{log}");
    assert!(!log.contains('\x1b'), "colour codes in the log: {log:?}");
}

/// A copy of the Rasa 3.6 assistant (`assistant/`), its domain files resolved.
fn assistant_copy(endpoints: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("assistant");
    std::fs::create_dir_all(dir.path().join("domain")).unwrap();
    for file in [
        "domain/subscription.yml",
        "domain/responses.yml",
        "domain/dialogue.yml",
    ] {
        std::fs::copy(root.join(file), dir.path().join(file)).unwrap();
    }
    std::fs::write(dir.path().join("endpoints.yml"), endpoints).unwrap();
    dir
}

/// `actiongate check`: success, stdout (the notes) and stderr (the problems).
fn check_out(dir: &Path) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_actiongate"))
        .args(["check", "--endpoints"])
        .arg(dir.join("endpoints.yml"))
        .arg("--project")
        .arg(dir)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn the_assistants_domain_carries_the_reply_signals() {
    let dir = assistant_copy("");
    let (ok, stdout, stderr) = check_out(dir.path());
    assert!(ok, "{stderr}");
    // It says which signal each deployment style needs.
    for style in ["Rasa 3.x", "Rasa Pro CALM", "Rasa Mantle"] {
        assert!(stdout.contains(style), "{stdout}");
    }
    assert!(stdout.contains("the intents are in"), "{stdout}");
}

#[test]
fn an_intent_or_confirm_slot_the_domain_lacks_fails() {
    let dir = assistant_copy("actiongate:\n  consent:\n    affirm_intents: [affirm, confirm]\n");
    let (ok, _, stderr) = check_out(dir.path());
    assert!(!ok);
    assert!(
        stderr.contains("actiongate.consent.affirm_intents") && stderr.contains("confirm"),
        "{stderr}"
    );
    let dir = assistant_copy("");
    edit(dir.path(), "domain/subscription.yml", "  - deny\n", "");
    let (ok, _, stderr) = check_out(dir.path());
    assert!(!ok);
    assert!(stderr.contains("deny_intents"), "{stderr}");
    let dir = assistant_copy("actiongate:\n  consent:\n    confirm_slot: confirm_change\n");
    let (ok, _, stderr) = check_out(dir.path());
    assert!(!ok);
    assert!(stderr.contains("not a slot of the domain"), "{stderr}");
    // A slot that is not a boolean can't say yes or no.
    edit(
        dir.path(),
        "domain/subscription.yml",
        "slots:\n",
        "slots:\n  confirm_change:\n    type: text\n    mappings:\n      - type: custom\n",
    );
    let (ok, _, stderr) = check_out(dir.path());
    assert!(!ok);
    assert!(stderr.contains("must be of type bool"), "{stderr}");
    edit(
        dir.path(),
        "domain/subscription.yml",
        "    type: text\n    mappings:\n      - type: custom\n",
        "    type: bool\n    mappings:\n      - type: custom\n",
    );
    let (ok, stdout, stderr) = check_out(dir.path());
    assert!(ok, "{stderr}");
    assert!(stdout.contains("bool slot"), "{stdout}");
}

#[test]
fn an_affirm_intent_that_is_also_a_deny_intent_fails() {
    let dir = assistant_copy(
        "actiongate:\n  consent:\n    affirm_intents: [affirm]\n    deny_intents: [deny, affirm]\n",
    );
    let (ok, _, stderr) = check_out(dir.path());
    assert!(!ok);
    assert!(
        stderr.contains("both an affirm and a deny intent"),
        "{stderr}"
    );
}

#[test]
fn an_escaped_placeholder_is_not_a_term_read_out() {
    // `{{change_tag}}` is printed literally by Rasa: the tag is not in the question.
    let dir = project_copy();
    edit(
        dir.path(),
        "responses/subscription_change.yml",
        "{change_tag}",
        "{{change_tag}}",
    );
    let (ok, stderr) = check(dir.path());
    assert!(!ok);
    assert!(stderr.contains("lacks {change_tag}"), "{stderr}");
}

/// A Rasa Pro deployment's endpoints.yml (CONTRACT.md section 0): sections and keys that
/// are Rasa's, the token from the environment.
const RASA_PRO_ENDPOINTS: &str = "action_endpoint:
  url: grpc://actions:5055
  token: ${ACTION_TOKEN}
  ssl_client_cert: client.pem
  ssl_client_key: client.key
  params:
    deployment: prod
tracing:
  - type: otlp
    endpoint: http://otel:4318
metrics:
  type: otlp
mcp_servers:
  - name: billing
    url: http://mcp:8080
a2a_server:
  enabled: false
privacy:
  anonymization: {}
";

#[test]
fn check_reads_a_rasa_pro_file_and_names_an_unset_variable() {
    let dir = project_copy();
    std::fs::write(dir.path().join("endpoints.yml"), RASA_PRO_ENDPOINTS).unwrap();
    let run = |token: Option<&str>| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_actiongate"));
        command
            .args(["check", "--endpoints"])
            .arg(dir.path().join("endpoints.yml"))
            .arg("--project")
            .arg(dir.path())
            .env_remove("ACTION_TOKEN");
        if let Some(token) = token {
            command.env("ACTION_TOKEN", token);
        }
        let out = command.output().unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stderr).into_owned()
                + &String::from_utf8_lossy(&out.stdout),
        )
    };
    let (ok, stderr) = run(Some("s3cret"));
    assert!(ok, "{stderr}");
    assert!(
        stderr.contains("traces are exported as `actiongate` to http://otel:4318")
            && stderr.contains("4318 is OTLP/HTTP's port"),
        "{stderr}"
    );
    let (ok, stderr) = run(None);
    assert!(!ok);
    assert!(
        stderr.contains("action_endpoint.token") && stderr.contains("${ACTION_TOKEN}"),
        "{stderr}"
    );
}

/// What `GET path` on 127.0.0.1:port answers: its status code, or 0 when nothing does.
fn status_of(port: u16, path: &str) -> u16 {
    use std::io::{Read, Write};
    let Ok(mut stream) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
        return 0;
    };
    let _ = write!(
        stream,
        "GET {path} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n"
    );
    let mut answer = String::new();
    let _ = stream.read_to_string(&mut answer);
    answer
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or(0)
}

/// `token: ${ACTION_TOKEN}` is the variable's value, as Rasa sends it: that token is let in,
/// the literal text is not (issue 27).
#[test]
fn serve_takes_the_token_from_the_environment_as_rasa_does() {
    let dir = tempfile::tempdir().unwrap();
    let endpoints = dir.path().join("endpoints.yml");
    std::fs::write(
        &endpoints,
        RASA_PRO_ENDPOINTS.replace("grpc://actions:5055", "http://127.0.0.1/webhook"),
    )
    .unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_actiongate"))
        .args(["serve", "--host", "127.0.0.1", "--port", "0"])
        .args(["--embedded-service-port", "0", "--data-dir"])
        .arg(dir.path())
        .arg("--endpoints")
        .arg(&endpoints)
        .env("ACTION_TOKEN", "from-the-environment")
        .env_remove("RUST_LOG")
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let (port, _) = listening_ports(child.stderr.take().unwrap());
    let with_value = status_of(port, "/actions?token=from-the-environment");
    let with_literal = status_of(port, "/actions?token=%24%7BACTION_TOKEN%7D");
    let without = status_of(port, "/actions");
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!((with_value, with_literal, without), (200, 401, 401));
}

/// The line a call ends with: at the default level only a call that did not succeed gets
/// one, with its status and duration; with `-v` a success's line says them too.
#[test]
fn a_calls_line_says_its_status_and_duration() {
    use std::io::BufRead;
    use std::time::Duration;
    for verbose in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let mut serve = Command::new(env!("CARGO_BIN_EXE_actiongate"));
        serve
            .args(["serve", "--host", "127.0.0.1", "--port", "0"])
            .args(["--embedded-service-port", "0", "--data-dir"])
            .arg(dir.path())
            .env_remove("RUST_LOG")
            .env_remove("NO_COLOR")
            .stderr(std::process::Stdio::piped());
        if verbose {
            serve.arg("-v");
        }
        let mut child = serve.spawn().unwrap();
        let (lines, received) = std::sync::mpsc::channel();
        let stderr = child.stderr.take().unwrap();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stderr).lines() {
                if lines.send(line.unwrap()).is_err() {
                    break;
                }
            }
        });
        let port = loop {
            let line = received.recv_timeout(Duration::from_secs(30)).unwrap();
            if line.contains("actiongate listening") {
                let port = line
                    .split_whitespace()
                    .find_map(|w| w.strip_prefix("port="));
                break port.unwrap().parse::<u16>().unwrap();
            }
        };
        assert_eq!(status_of(port, "/health"), 200);
        assert_eq!(status_of(port, "/nowhere"), 404);
        // The 404's line comes after the 200's, if that one is logged at all.
        let mut served = Vec::new();
        while !served.iter().any(|l: &String| l.contains("status=404")) {
            let line = received.recv_timeout(Duration::from_secs(30)).unwrap();
            if line.contains("served") {
                served.push(line);
            }
        }
        child.kill().unwrap();
        child.wait().unwrap();
        let failed = served.iter().find(|l| l.contains("status=404")).unwrap();
        assert!(failed.contains(" ms="), "{failed}");
        assert!(
            failed.contains("method=GET path=/nowhere"),
            "the line says which call it was: {failed}"
        );
        let succeeded: Vec<_> = served.iter().filter(|l| l.contains("/health")).collect();
        if verbose {
            assert_eq!(succeeded.len(), 1, "{served:?}");
            assert!(succeeded[0].contains("status=200") && succeeded[0].contains(" ms="));
        } else {
            assert!(succeeded.is_empty(), "{served:?}");
        }
    }
}

/// An OTLP/gRPC receiver, from the OpenTelemetry project's own protocol definitions: what
/// a collector is sent, kept as it arrives.
mod otlp {
    use std::sync::{Arc, Mutex};

    use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
        TraceService, TraceServiceServer,
    };
    use opentelemetry_proto::tonic::collector::trace::v1::{
        ExportTraceServiceRequest, ExportTraceServiceResponse,
    };
    use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
    use opentelemetry_proto::tonic::common::v1::KeyValue;

    /// One span as received, with its service's name.
    #[derive(Debug, Clone)]
    pub struct Span {
        pub service: String,
        pub name: String,
        pub trace_id: String,
        pub span_id: String,
        pub parent: String,
        pub start: u64,
        pub end: u64,
        pub attributes: Vec<(String, String)>,
    }

    impl Span {
        pub fn attribute(&self, key: &str) -> Option<&str> {
            self.attributes
                .iter()
                .find(|(k, _)| k == key)
                .map(|(_, v)| v.as_str())
        }
    }

    #[derive(Clone, Default)]
    pub struct Receiver(Arc<Mutex<Vec<Span>>>);

    fn text(kv: &KeyValue) -> (String, String) {
        let value = match kv.value.as_ref().and_then(|v| v.value.as_ref()) {
            Some(AnyValue::StringValue(s)) => s.clone(),
            Some(AnyValue::IntValue(i)) => i.to_string(),
            Some(AnyValue::BoolValue(b)) => b.to_string(),
            Some(AnyValue::DoubleValue(d)) => d.to_string(),
            other => format!("{other:?}"),
        };
        (kv.key.clone(), value)
    }

    #[tonic::async_trait]
    impl TraceService for Receiver {
        async fn export(
            &self,
            request: tonic::Request<ExportTraceServiceRequest>,
        ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
            let mut spans = self.0.lock().unwrap();
            for resource in request.into_inner().resource_spans {
                let service = resource
                    .resource
                    .iter()
                    .flat_map(|r| r.attributes.iter().map(text))
                    .find(|(k, _)| k == "service.name")
                    .map(|(_, v)| v)
                    .unwrap_or_default();
                for span in resource.scope_spans.into_iter().flat_map(|s| s.spans) {
                    // An exporter may deliver a batch again (its retry after a slow
                    // answer): one span is kept once, as a collector keeps it.
                    let span_id = hex::encode(&span.span_id);
                    if spans.iter().any(|s| s.span_id == span_id) {
                        continue;
                    }
                    spans.push(Span {
                        service: service.clone(),
                        name: span.name.clone(),
                        trace_id: hex::encode(&span.trace_id),
                        span_id,
                        parent: hex::encode(&span.parent_span_id),
                        start: span.start_time_unix_nano,
                        end: span.end_time_unix_nano,
                        attributes: span.attributes.iter().map(text).collect(),
                    });
                }
            }
            Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
        }
    }

    impl Receiver {
        /// Listens on a free port of 127.0.0.1; its address.
        /// With `tls` (a certificate and its key, PEM), over TLS.
        pub async fn start(&self, tls: Option<(String, String)>) -> std::net::SocketAddr {
            let incoming =
                tonic::transport::server::TcpIncoming::bind("127.0.0.1:0".parse().unwrap())
                    .unwrap();
            let addr = incoming.local_addr().unwrap();
            let service = TraceServiceServer::new(self.clone());
            let mut server = tonic::transport::Server::builder();
            if let Some((cert, key)) = tls {
                server = server
                    .tls_config(
                        tonic::transport::ServerTlsConfig::new()
                            .identity(tonic::transport::Identity::from_pem(cert, key)),
                    )
                    .unwrap();
            }
            tokio::spawn(server.add_service(service).serve_with_incoming(incoming));
            addr
        }

        /// The spans of one trace, once `until` holds of them (at most 20 s).
        pub async fn trace(&self, trace_id: &str, until: impl Fn(&[Span]) -> bool) -> Vec<Span> {
            self.trace_within(trace_id, 200, until).await
        }

        /// The same, polling `tries` times, 100 ms apart.
        pub async fn trace_within(
            &self,
            trace_id: &str,
            tries: usize,
            until: impl Fn(&[Span]) -> bool,
        ) -> Vec<Span> {
            let mut spans = Vec::new();
            for _ in 0..tries {
                spans = self
                    .0
                    .lock()
                    .unwrap()
                    .iter()
                    .filter(|s| s.trace_id == trace_id)
                    .cloned()
                    .collect();
                if until(&spans) {
                    break;
                }
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
            spans
        }
    }
}

/// `actiongate serve` with `tracing:` set to `section`: the process, its webhook port and
/// its gRPC port, once both are bound.
async fn serve_traced(section: &str, dir: &Path) -> (std::process::Child, u16, u16) {
    let endpoints = dir.join("endpoints.yml");
    std::fs::write(
        &endpoints,
        format!("action_endpoint:\n  url: http://127.0.0.1/webhook\ntracing:\n  {section}\n"),
    )
    .unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_actiongate"))
        .args([
            "serve",
            "--host",
            "127.0.0.1",
            "--port",
            "0",
            "--grpc-port",
            "0",
        ])
        .args(["--embedded-service-port", "0", "--data-dir"])
        .arg(dir)
        .arg("--endpoints")
        .arg(&endpoints)
        .env("OTEL_BSP_SCHEDULE_DELAY", "100")
        .env_remove("RUST_LOG")
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let (port, grpc_port) = tokio::task::spawn_blocking({
        let stderr = child.stderr.take().unwrap();
        move || listening_ports(stderr)
    })
    .await
    .unwrap();
    (child, port, grpc_port.expect("gRPC is served"))
}

/// The ports `actiongate serve` bound (it was asked for port 0, so no other process can
/// hold them), read off its "actiongate listening" line; the rest of the log is drained
/// in the background so the server never blocks on a full pipe.
fn listening_ports(stderr: std::process::ChildStderr) -> (u16, Option<u16>) {
    use std::io::BufRead;
    let mut lines = std::io::BufReader::new(stderr).lines();
    let mut log = String::new();
    let ports = loop {
        let Some(Ok(line)) = lines.next() else {
            panic!("the server ended before it was listening:\n{log}");
        };
        log.push_str(&line);
        log.push('\n');
        if line.contains("actiongate listening") {
            let field = |name: &str| -> Option<u16> {
                line.split_whitespace()
                    .find_map(|word| word.strip_prefix(name))
                    .and_then(|value| value.parse().ok())
            };
            let port = field("port=").unwrap_or_else(|| panic!("no port in {line}"));
            break (port, field("grpc_port="));
        }
    };
    std::thread::spawn(move || lines.for_each(drop));
    ports
}

/// endpoints.yml's `tracing:` (OTLP, as Rasa writes it) exports a span per action call
/// that continues the trace Rasa sent, over HTTP (`traceparent` header) and gRPC (the same
/// key in metadata), with rasa-sdk's attributes, and under it a span per guard step and per
/// call to the subscription service, which say why a change was blocked (issue 27).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn traces_continue_rasas_and_show_each_guard_step() {
    use actionserver::grpc_convert::{request_from_json, response_to_json};
    use actionserver::grpc_proto::action_service_client::ActionServiceClient;

    let receiver = otlp::Receiver::default();
    let collector = receiver.start(None).await;
    let dir = tempfile::tempdir().unwrap();
    let (mut child, port, grpc_port) = serve_traced(
        &format!("type: otlp\n  endpoint: {collector}\n  insecure: true\n  service_name: actions-under-test"),
        dir.path(),
    )
    .await;
    let server = testkit::Endpoint::new(&format!("http://127.0.0.1:{port}"));
    // Over gRPC: the customer says no; the guard stops at the conversation's checks.
    let (grpc_trace, grpc_parent) = ("0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331");
    let mut declined = testkit::asked(&server, "trace-grpc").await;
    declined.user("No, don't do it", "deny", &[]);
    let mut request = tonic::Request::new(request_from_json(
        &declined.request("apply_subscription_change"),
    ));
    request.metadata_mut().insert(
        "traceparent",
        format!("00-{grpc_trace}-{grpc_parent}-01").parse().unwrap(),
    );
    let channel = tonic::transport::Channel::from_shared(format!("http://127.0.0.1:{grpc_port}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let answer = ActionServiceClient::new(channel)
        .webhook(request)
        .await
        .unwrap()
        .into_inner();
    let answer = response_to_json(&answer);
    testkit::assert_outcome(&testkit::outcome_of(&answer), "blocked", Some("declined"));

    // Over HTTP: a plain yes; every step runs and the change is made.
    let (http_trace, http_parent) = ("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7");
    let mut yes = testkit::asked(&server, "trace-http").await;
    yes.user("yes", "affirm", &[]);
    let body = yes.request("apply_subscription_change");
    let message_id = body["tracker"]["latest_message"]["message_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let answer: serde_json::Value = server
        .http
        .post(format!("{}/webhook", server.url))
        .header("traceparent", format!("00-{http_trace}-{http_parent}-01"))
        .json(&body)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    testkit::assert_outcome(&testkit::outcome_of(&answer), "applied", None);

    let has = |spans: &[otlp::Span], name: &str| spans.iter().any(|s| s.name == name);
    let http = receiver
        .trace(http_trace, |s| {
            has(s, "guard.audit") && has(s, "create_app.webhook")
        })
        .await;
    let grpc = receiver
        .trace(grpc_trace, |s| {
            has(s, "guard.audit") && has(s, "action_server_webhook.ActionService/Webhook")
        })
        .await;
    child.kill().unwrap();
    child.wait().unwrap();
    let names = |spans: &[otlp::Span]| spans.iter().map(|s| s.name.clone()).collect::<Vec<_>>();
    let one = |spans: &[otlp::Span], name: &str| -> otlp::Span {
        let found: Vec<&otlp::Span> = spans.iter().filter(|s| s.name == name).collect();
        assert_eq!(found.len(), 1, "{name} in {:?}", names(spans));
        found[0].clone()
    };

    // The call's span continues Rasa's, with rasa-sdk's attributes.
    let call = one(&http, "create_app.webhook");
    assert_eq!(call.parent, http_parent, "the trace Rasa sent is continued");
    assert_eq!(call.service, "actions-under-test");
    assert_eq!(
        call.attribute("next_action"),
        Some("apply_subscription_change")
    );
    assert_eq!(call.attribute("sender_id"), Some("trace-http"));
    assert_eq!(call.attribute("version"), Some("3.6.21"));
    assert_eq!(call.attribute("message_id"), Some(message_id.as_str()));
    assert_eq!(call.attribute("http.route"), Some("/webhook"));
    // Under it the guard, and under the guard each step in order, each its child; the
    // service's calls under the steps that made them.
    let guard = one(&http, "consent_guard");
    assert_eq!(guard.parent, call.span_id);
    assert_eq!(guard.attribute("status"), Some("applied"));
    let steps = [
        "guard.conversation_checks",
        "guard.repeats",
        "guard.facts",
        "guard.claim",
        "guard.command",
        "guard.audit",
    ];
    for step in steps {
        assert_eq!(one(&http, step).parent, guard.span_id, "{step}");
    }
    // One after the other: each step's span ends before the next begins, so the time
    // each took can be read off the trace.
    for pair in steps.windows(2) {
        let (this, next) = (one(&http, pair[0]), one(&http, pair[1]));
        assert!(
            this.start <= this.end && this.end <= next.start,
            "{} ({}..{}) overlaps {} ({}..)",
            pair[0],
            this.start,
            this.end,
            pair[1],
            next.start
        );
    }
    let read = one(&http, "subscription_service.get");
    assert_eq!(read.parent, one(&http, "guard.facts").span_id);
    assert_eq!(read.attribute("http.response.status_code"), Some("200"));
    let sent = one(&http, "subscription_service.send_change");
    assert_eq!(sent.parent, one(&http, "guard.command").span_id);
    assert_eq!(sent.attribute("http.request.method"), Some("POST"));
    assert_eq!(sent.attribute("http.response.status_code"), Some("201"));
    assert_eq!(
        one(&http, "guard.command").attribute("status"),
        Some("applied")
    );

    // gRPC: the same, and the step that refused says why; nothing was read or sent.
    let call = one(&grpc, "action_server_webhook.ActionService/Webhook");
    assert_eq!(call.parent, grpc_parent);
    assert_eq!(call.attribute("rpc.system"), Some("grpc"));
    assert_eq!(call.attribute("sender_id"), Some("trace-grpc"));
    let checks = one(&grpc, "guard.conversation_checks");
    assert_eq!(checks.attribute("reason"), Some("declined"));
    assert_eq!(
        one(&grpc, "consent_guard").attribute("reason"),
        Some("declined")
    );
    for never in [
        "guard.facts",
        "guard.command",
        "subscription_service.send_change",
    ] {
        assert!(!has(&grpc, never), "{never} in {:?}", names(&grpc));
    }
}

/// TLS by default (an endpoint without a scheme), with `root_certificates`: spans reach a
/// collector whose certificate chains to the file's CA, and not one whose certificate does
/// not; the server serves either way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn traces_go_over_tls_only_to_a_collector_the_root_certificates_vouch_for() {
    let cert = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
    let other = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("ca.pem");
    std::fs::write(&ca, cert.cert.pem()).unwrap();
    let mut arrived = Vec::new();
    for identity in [&cert, &other] {
        let receiver = otlp::Receiver::default();
        let collector = receiver
            .start(Some((
                identity.cert.pem(),
                identity.signing_key.serialize_pem(),
            )))
            .await;
        let data = tempfile::tempdir().unwrap();
        let (mut child, port, _) = serve_traced(
            &format!(
                "type: otlp\n  endpoint: localhost:{}\n  root_certificates: {}",
                collector.port(),
                ca.display()
            ),
            data.path(),
        )
        .await;
        let trace = "5bf92f3577b34da6a3ce929d0e0e4736";
        let server = testkit::Endpoint::new(&format!("http://127.0.0.1:{port}"));
        let body = testkit::Chat::new("tls-trace", None).request("apply_subscription_change");
        let status = server
            .http
            .post(format!("{}/webhook", server.url))
            .header("traceparent", format!("00-{trace}-00f067aa0ba902b7-01"))
            .json(&body)
            .send()
            .await
            .unwrap()
            .status();
        assert_eq!(status, 200);
        // The vouched-for collector has the spans within a second; the other gets three.
        let spans = receiver
            .trace_within(trace, 30, |s| s.iter().any(|s| s.name == "consent_guard"))
            .await;
        assert_eq!(status_of(port, "/health"), 200, "the server still serves");
        child.kill().unwrap();
        child.wait().unwrap();
        arrived.push(spans.iter().any(|s| s.name == "create_app.webhook"));
    }
    assert_eq!(arrived, [true, false], "vouched for, then not");
}
