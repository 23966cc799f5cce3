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

/// A signing secret that is set but empty would trust unsigned account ids: refused, in
/// the environment and in endpoints.yml (CONTRACT.md section 2).
#[test]
fn serve_refuses_an_empty_signing_secret() {
    let dir = tempfile::tempdir().unwrap();
    let endpoints = dir.path().join("endpoints.yml");
    for (file, env) in [
        ("actiongate:\n  consent: {signing_secret: \"\"}\n", None),
        ("", Some("")),
    ] {
        std::fs::write(&endpoints, file).unwrap();
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
            .arg(dir.path())
            .arg("--endpoints")
            .arg(&endpoints);
        if let Some(value) = env {
            command.env("ACTIONGATE_SIGNING_SECRET", value);
        }
        let out = command.output().unwrap();
        assert!(!out.status.success(), "{file:?} {env:?}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("signing secret is set but empty"),
            "{}",
            String::from_utf8_lossy(&out.stderr)
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
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (ok, stderr) = run(Some("s3cret"));
    assert!(ok, "{stderr}");
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
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut child = Command::new(env!("CARGO_BIN_EXE_actiongate"))
        .args(["serve", "--host", "127.0.0.1", "--port"])
        .arg(port.to_string())
        .args(["--embedded-service-port", "0", "--data-dir"])
        .arg(dir.path())
        .arg("--endpoints")
        .arg(&endpoints)
        .env("ACTION_TOKEN", "from-the-environment")
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut up = false;
    for _ in 0..300 {
        if status_of(port, "/health") == 200 {
            up = true;
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let with_value = status_of(port, "/actions?token=from-the-environment");
    let with_literal = status_of(port, "/actions?token=%24%7BACTION_TOKEN%7D");
    let without = status_of(port, "/actions");
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(up, "the server never answered /health");
    assert_eq!((with_value, with_literal, without), (200, 401, 401));
}
