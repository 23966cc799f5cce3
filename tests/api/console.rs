//! The operator console over HTTP: every route needs a session; sign-in with an argon2
//! hash; forms need the session's token and the console's own origin; decisions go through
//! the guard (one change, checked at the service); the console is never on the port Rasa
//! calls. (The same console in a real browser: scripts/console-browser.sh.)

use crate::common;

use std::time::Duration;

use common::{spawn_app_with, Chat, ChatExt, TestApp};

use actiongate::config::ConsoleSettings;
use actiongate::store::ApprovalState;

const WINE: &str = "WS-SUB-7001";

fn console(session: Duration) -> ConsoleSettings {
    ConsoleSettings {
        host: "127.0.0.1".into(),
        port: 0,
        operators: vec![(
            "ana".into(),
            actiongate::console::auth::hash_password("correct horse"),
        )],
        session,
        hosts: vec!["console.example".into()],
    }
}

async fn app_with_console(session: Duration) -> TestApp {
    spawn_app_with(&[], |s| s.console = Some(console(session))).await
}

/// A client that keeps no cookies and follows no redirects: each test says what it sends.
fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

fn set_cookie(response: &reqwest::Response, name: &str) -> Option<String> {
    response
        .headers()
        .get_all("set-cookie")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find(|v| v.starts_with(&format!("{name}=")))
        .map(str::to_owned)
}

fn value_of(cookie: &str) -> String {
    cookie
        .split(';')
        .next()
        .unwrap()
        .split_once('=')
        .unwrap()
        .1
        .to_owned()
}

fn hidden_csrf(page: &str) -> String {
    let at = page
        .find("name=\"csrf\" value=\"")
        .expect("a form with a token")
        + 19;
    page[at..at + 64].to_owned()
}

/// Signs in as ana: the session cookie (`ag_session=...`) and the session's form token.
async fn sign_in(app: &TestApp) -> (String, String) {
    let http = client();
    let answer = try_sign_in(&app.console_url(), "ana", "correct horse").await;
    assert_eq!(answer.status(), 303);
    let session = set_cookie(&answer, "ag_session").expect("a session cookie");
    for attribute in ["HttpOnly", "Secure", "SameSite=Strict", "Path=/"] {
        assert!(session.contains(attribute), "{attribute} in {session}");
    }
    let cookie = format!("ag_session={}", value_of(&session));
    let home = http
        .get(format!("{}/", app.console_url()))
        .header("cookie", &cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(home.status(), 200);
    let csrf = hidden_csrf(&home.text().await.unwrap());
    (cookie, csrf)
}

async fn held(app: &TestApp, sender: &str) -> String {
    let mut c = Chat::new(sender, Some("acct-21"));
    c.request_change(app, WINE, "cancel_now").await.unwrap();
    assert_eq!(c.say_yes_and_apply(app).await["status"], "held");
    app.store
        .latest_approval_for_sender(sender)
        .await
        .unwrap()
        .unwrap()
        .request_key
}

#[tokio::test]
async fn every_route_without_a_session_is_redirected_or_refused() {
    let app = app_with_console(Duration::from_secs(600)).await;
    let key = held(&app, "no-session").await;
    let http = client();
    for path in [
        "/",
        "/pending",
        "/operations",
        "/operations?account=acct-21",
        "/conversations/no-session",
        "/mismatches",
    ] {
        let r = http
            .get(format!("{}{path}", app.console_url()))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 303, "{path}");
        assert_eq!(r.headers()["location"], "/sign-in", "{path}");
    }
    let csv = http
        .get(format!("{}/operations.csv", app.console_url()))
        .send()
        .await
        .unwrap();
    assert_eq!(csv.status(), 401);
    for path in [
        format!("/held/{key}/approve"),
        format!("/held/{key}/reject"),
        format!("/pending/{key}/check"),
        "/sign-out".into(),
    ] {
        let r = http
            .post(format!("{}{path}", app.console_url()))
            .form(&[("csrf", "x"), ("note", "n")])
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 401, "{path}");
    }
    // A made-up session is no session.
    let r = http
        .get(format!("{}/", app.console_url()))
        .header("cookie", "ag_session=0000")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 303);
    assert_eq!(
        app.store.approval(&key).await.unwrap().unwrap().state,
        ApprovalState::Held
    );
    assert_eq!(app.revision(WINE).await, 3, "nothing sent");
}

#[tokio::test]
async fn a_wrong_password_is_refused_and_a_session_expires() {
    let app = app_with_console(Duration::from_secs(1)).await;
    let http = client();
    let page = http
        .get(format!("{}/sign-in", app.console_url()))
        .send()
        .await
        .unwrap();
    let pre = value_of(&set_cookie(&page, "ag_sign_in").unwrap());
    let token = hidden_csrf(&page.text().await.unwrap());
    for (name, password) in [("ana", "wrong"), ("bob", "correct horse"), ("", "")] {
        let r = http
            .post(format!("{}/sign-in", app.console_url()))
            .header("cookie", format!("ag_sign_in={pre}"))
            .form(&[
                ("csrf", token.as_str()),
                ("name", name),
                ("password", password),
            ])
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 401, "{name}");
        assert!(set_cookie(&r, "ag_session").is_none());
        assert!(r.text().await.unwrap().contains("do not match"));
    }
    // The sign-in form needs its own token too.
    let r = http
        .post(format!("{}/sign-in", app.console_url()))
        .form(&[
            ("csrf", token.as_str()),
            ("name", "ana"),
            ("password", "correct horse"),
        ])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403, "no sign-in cookie");
    let (cookie, _) = sign_in(&app).await;
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let r = http
        .get(format!("{}/", app.console_url()))
        .header("cookie", &cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 303, "the session expired");
}

#[tokio::test]
async fn forged_and_cross_origin_forms_are_refused_and_change_nothing() {
    let app = app_with_console(Duration::from_secs(600)).await;
    let key = held(&app, "forged").await;
    let (cookie, csrf) = sign_in(&app).await;
    let http = client();
    let approve = format!("{}/held/{key}/approve", app.console_url());
    let without = http
        .post(&approve)
        .header("cookie", &cookie)
        .form(&[("note", "")])
        .send()
        .await
        .unwrap();
    assert_eq!(without.status(), 403, "no token");
    let wrong = http
        .post(&approve)
        .header("cookie", &cookie)
        .form(&[("csrf", "f".repeat(64).as_str())])
        .send()
        .await
        .unwrap();
    assert_eq!(wrong.status(), 403, "another token");
    let elsewhere = http
        .post(&approve)
        .header("cookie", &cookie)
        .header("origin", "http://evil.example")
        .form(&[("csrf", csrf.as_str())])
        .send()
        .await
        .unwrap();
    assert_eq!(elsewhere.status(), 403, "another origin");
    assert_eq!(
        app.store.approval(&key).await.unwrap().unwrap().state,
        ApprovalState::Held
    );
    assert_eq!(app.revision(WINE).await, 3, "nothing sent");
    // With the token, from the console's own origin: approved, one change.
    let origin = app.console_url();
    let ok = http
        .post(&approve)
        .header("cookie", &cookie)
        .header("origin", &origin)
        .form(&[
            ("csrf", csrf.as_str()),
            ("note", "checked with the customer"),
        ])
        .send()
        .await
        .unwrap();
    assert_eq!(ok.status(), 303);
    assert!(ok.headers()["location"]
        .to_str()
        .unwrap()
        .contains("Approved"));
    assert_eq!(app.revision(WINE).await, 4, "one change");
    let again = http
        .post(&approve)
        .header("cookie", &cookie)
        .form(&[("csrf", csrf.as_str())])
        .send()
        .await
        .unwrap();
    assert!(again.headers()["location"]
        .to_str()
        .unwrap()
        .contains("Already"));
    assert_eq!(app.revision(WINE).await, 4, "still one change");
    let audit = app.store.audit_entries(None, None).await.unwrap();
    let decision = audit
        .iter()
        .find(|e| e.action == "approve_subscription_change")
        .unwrap();
    assert_eq!(decision.operator.as_deref(), Some("ana"));
    // Signed out: the session is gone.
    let out = http
        .post(format!("{}/sign-out", app.console_url()))
        .header("cookie", &cookie)
        .form(&[("csrf", csrf.as_str())])
        .send()
        .await
        .unwrap();
    assert_eq!(out.status(), 303);
    let after = http
        .get(format!("{}/", app.console_url()))
        .header("cookie", &cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(after.status(), 303);
}

#[tokio::test]
async fn the_pages_show_what_a_reviewer_needs_and_the_csv_is_safe() {
    let app = app_with_console(Duration::from_secs(600)).await;
    let key = held(&app, "pages").await;
    let (cookie, csrf) = sign_in(&app).await;
    let http = client();
    let get = |path: String| {
        let http = http.clone();
        let cookie = cookie.clone();
        async move {
            let r = http
                .get(path)
                .header("cookie", cookie)
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 200);
            r.text().await.unwrap()
        }
    };
    let home = get(format!("{}/", app.console_url())).await;
    for part in [
        "acct-21",
        "WS-SUB-7001",
        "cancel_now",
        "40 EUR",
        "They replied:",
        "yes",
        "Approve",
        "Reject",
    ] {
        assert!(home.contains(part), "{part} on the held page");
    }
    assert!(
        !home.contains("session_started_metadata") && !home.contains("account_id"),
        "no metadata"
    );
    // A rejection needs a note; with one, the customer is told it.
    let reject = format!("{}/held/{key}/reject", app.console_url());
    let r = http
        .post(&reject)
        .header("cookie", &cookie)
        .form(&[("csrf", csrf.as_str()), ("note", " ")])
        .send()
        .await
        .unwrap();
    assert!(r.headers()["location"]
        .to_str()
        .unwrap()
        .contains("needs%20a%20note"));
    let r = http
        .post(&reject)
        .header("cookie", &cookie)
        .form(&[
            ("csrf", csrf.as_str()),
            ("note", "=HYPERLINK(\"x\") please call us"),
        ])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 303);
    assert_eq!(
        app.store.approval(&key).await.unwrap().unwrap().state,
        ApprovalState::Rejected
    );
    let timeline = get(format!("{}/conversations/pages", app.console_url())).await;
    for part in [
        "select_subscription_change",
        "apply_subscription_change",
        "reject_subscription_change",
        "ana",
        "approval_rejected",
    ] {
        assert!(timeline.contains(part), "{part} in the timeline");
    }
    let search = get(format!(
        "{}/operations?account=acct-21&outcome=rejected",
        app.console_url()
    ))
    .await;
    assert!(search.contains("rejected") && search.contains("WS-SUB-7001"));
    // A hold the customer withdrew is shown as such.
    let mut withdrawing = Chat::new("withdrawing", Some("acct-21"));
    withdrawing
        .request_change(&app, WINE, "cancel_now")
        .await
        .unwrap();
    assert_eq!(withdrawing.say_yes_and_apply(&app).await["status"], "held");
    withdrawing.user("take it back", "withdraw_change", &[]);
    let (_, body) = withdrawing
        .run(&app, "withdraw_subscription_change")
        .await
        .unwrap();
    assert_eq!(common::outcome_of(&body)["reason"], "withdrawn");
    let search = get(format!(
        "{}/operations?account=acct-21&outcome=withdrawn",
        app.console_url()
    ))
    .await;
    assert!(
        search.contains("withdrawn") && search.contains("withdrawing"),
        "{search}"
    );
    let bad = get(format!("{}/operations?since=yesterday", app.console_url())).await;
    assert!(bad.contains("is not a date"));
    let csv = get(format!(
        "{}/operations.csv?account=acct-21",
        app.console_url()
    ))
    .await;
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(
        lines[0],
        "created,account,subscription,change_type,outcome,decided_by,conversation,request_key"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.contains("\"rejected\",\"ana\",\"pages\"")),
        "{csv}"
    );
    // An operation's outcome unknown: pending verification, checked without sending again.
    let pending = get(format!("{}/pending", app.console_url())).await;
    assert!(pending.contains("No outcome is unknown"));
}

#[tokio::test]
async fn the_console_is_not_on_the_port_rasa_calls() {
    let app = app_with_console(Duration::from_secs(600)).await;
    for path in ["/sign-in", "/operations", "/"] {
        let r = client()
            .get(format!("{}{path}", app.url))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 404, "{path} on the Rasa port");
    }
    // Asked for the same port, the server refuses to start.
    let dir = tempfile::tempdir().unwrap();
    let endpoints = dir.path().join("endpoints.yml");
    std::fs::write(&endpoints, "").unwrap();
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_actiongate"))
        .args([
            "serve",
            "--port",
            "5999",
            "--admin-port",
            "5999",
            "--endpoints",
            endpoints.to_str().unwrap(),
        ])
        .args(["--data-dir", dir.path().to_str().unwrap()])
        .output()
        .unwrap();
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("never served on the port Rasa calls"));
    // A hash that is not argon2 is a configuration error naming the operator.
    std::fs::write(
        &endpoints,
        "actiongate:\n  console:\n    operators:\n      - {name: ana, password_hash: plain}\n",
    )
    .unwrap();
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_actiongate"))
        .args([
            "serve",
            "--admin-port",
            "0",
            "--endpoints",
            endpoints.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr)
        .contains("ana: password_hash is not an argon2 hash"));
}

#[tokio::test]
async fn pending_verification_is_checked_without_sending_again() {
    let app = spawn_app_with(
        &[
            "--embedded-command-delay-ms",
            "1500",
            "--subscriptions-timeout",
            "0.5",
        ],
        |s| s.console = Some(console(Duration::from_secs(600))),
    )
    .await;
    let mut c = Chat::new("unknown-outcome", Some("acct-7"));
    c.request_change(&app, "WS-SUB-3304", "stop_renewal")
        .await
        .unwrap();
    assert_eq!(
        c.say_yes_and_apply(&app).await["status"],
        "pending_verification"
    );
    let key = app
        .store
        .latest_for_sender("unknown-outcome")
        .await
        .unwrap()
        .unwrap()
        .request_key;
    let (cookie, csrf) = sign_in(&app).await;
    let http = client();
    let page = http
        .get(format!("{}/pending", app.console_url()))
        .header("cookie", &cookie)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        page.contains("WS-SUB-3304") && page.contains(&format!("/pending/{key}/check")),
        "{page}"
    );
    tokio::time::sleep(Duration::from_millis(1600)).await;
    let checked = http
        .post(format!("{}/pending/{key}/check", app.console_url()))
        .header("cookie", &cookie)
        .form(&[("csrf", csrf.as_str())])
        .send()
        .await
        .unwrap();
    assert!(
        checked.headers()["location"]
            .to_str()
            .unwrap()
            .contains("Checked%3A%20applied"),
        "{:?}",
        checked.headers()
    );
    assert_eq!(
        app.revision("WS-SUB-3304").await,
        5,
        "one change, made by the first command"
    );
}

#[tokio::test]
async fn mismatched_service_events_are_shown_with_the_request_and_the_confirmed_terms() {
    use actiongate::store::ReceivedEvent;
    let app = app_with_console(Duration::from_secs(600)).await;
    let mut c = Chat::new("mismatch-shown", Some("acct-7"));
    c.request_change(&app, "WS-SUB-3304", "stop_renewal")
        .await
        .unwrap();
    assert_eq!(c.say_yes_and_apply(&app).await["status"], "applied");
    let op = app
        .store
        .latest_for_sender("mismatch-shown")
        .await
        .unwrap()
        .unwrap();
    let event = ReceivedEvent {
        id: "evt_shown".into(),
        received_at: actiongate::store::now_ms(),
        kind: "change.scheduled".into(),
        subscription: "WS-SUB-4410".into(),
        account: "acct-9".into(),
        revision: 2,
        request_key: Some(op.request_key.clone()),
        verdict: "received".into(),
        detail: None,
        body: "{}".into(),
    };
    assert!(app
        .store
        .take_event(&event, Duration::from_secs(30))
        .await
        .unwrap());
    app.store
        .finish_event(
            "evt_shown",
            "mismatch",
            Some("the event names subscription WS-SUB-4410"),
        )
        .await
        .unwrap();
    let (cookie, _) = sign_in(&app).await;
    let page = client()
        .get(format!("{}/mismatches", app.console_url()))
        .header("cookie", &cookie)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for part in [
        "evt_shown",
        "the event names subscription WS-SUB-4410",
        "acct-9",
        "stop_renewal on WS-SUB-3304 at r4",
        "/conversations/mismatch-shown",
        "Stop renewal",
    ] {
        assert!(page.contains(part), "{part} on the mismatches page");
    }
}

/// Posts a sign-in with a fresh form; the answer.
async fn try_sign_in(console: &str, name: &str, password: &str) -> reqwest::Response {
    let http = client();
    let page = http.get(format!("{console}/sign-in")).send().await.unwrap();
    let pre = value_of(&set_cookie(&page, "ag_sign_in").expect("the sign-in form's cookie"));
    let token = hidden_csrf(&page.text().await.unwrap());
    http.post(format!("{console}/sign-in"))
        .header("cookie", format!("ag_sign_in={pre}"))
        .form(&[
            ("csrf", token.as_str()),
            ("name", name),
            ("password", password),
        ])
        .send()
        .await
        .unwrap()
}

/// Guessing is throttled: after five wrong passwords the name (and the address) is locked,
/// answered 429 with Retry-After even for the right password, for a time that doubles;
/// past it, the right password works.
#[tokio::test]
async fn sign_in_attempts_are_limited() {
    let app = app_with_console(Duration::from_secs(600)).await;
    for _ in 0..5 {
        assert_eq!(
            try_sign_in(&app.console_url(), "ana", "wrong")
                .await
                .status(),
            401
        );
    }
    let locked = try_sign_in(&app.console_url(), "ana", "correct horse").await;
    assert_eq!(locked.status(), 429);
    let wait: u64 = locked.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(wait >= 1);
    assert!(set_cookie(&locked, "ag_session").is_none());
    tokio::time::sleep(Duration::from_millis(1100 * wait)).await;
    let signed_in = try_sign_in(&app.console_url(), "ana", "correct horse").await;
    assert_eq!(signed_in.status(), 303);
}

/// Argon2 runs off the console's worker and only a few at once: while sixteen sign-ins
/// arrive together, a signed-in operator's page still answers, and the sign-ins beyond the
/// bound are answered 429 at once rather than queued.
#[tokio::test]
async fn sign_ins_never_queue_a_signed_in_operators_page() {
    let app = app_with_console(Duration::from_secs(600)).await;
    let (cookie, _) = sign_in(&app).await;
    let guesses: Vec<_> = (0..16)
        .map(|n| {
            let url = app.console_url();
            tokio::spawn(async move {
                try_sign_in(&url, &format!("guess-{n}"), "wrong")
                    .await
                    .status()
                    .as_u16()
            })
        })
        .collect();
    let started = std::time::Instant::now();
    let page = client()
        .get(format!("{}/", app.console_url()))
        .header("cookie", &cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), 200);
    println!(
        "a signed-in page during 16 sign-ins: {:?}",
        started.elapsed()
    );
    let mut statuses = Vec::new();
    for guess in guesses {
        statuses.push(guess.await.unwrap());
    }
    assert!(
        statuses.iter().all(|s| *s == 401 || *s == 429),
        "{statuses:?}"
    );
}

/// A session ends when its operator is removed or their password changes (checked on every
/// request), and at `actiongate approvals sessions revoke NAME`.
#[tokio::test]
async fn sessions_end_with_their_operators_credential() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().to_owned();
    let start = |operators: Vec<(String, String)>| {
        let data = data.clone();
        async move {
            let mut settings = common::test_settings(&data, &[]);
            settings.console = Some(ConsoleSettings {
                operators,
                ..console(Duration::from_secs(600))
            });
            common::spawn_settings(settings, tempfile::tempdir().unwrap()).await
        }
    };
    let ana = (
        "ana".to_owned(),
        actiongate::console::auth::hash_password("correct horse"),
    );
    let app = start(vec![ana.clone()]).await;
    let (cookie, _) = sign_in(&app).await;
    let home = |app: &TestApp| {
        let (url, cookie) = (app.console_url(), cookie.clone());
        async move {
            client()
                .get(format!("{url}/"))
                .header("cookie", cookie)
                .send()
                .await
                .unwrap()
                .status()
                .as_u16()
        }
    };
    assert_eq!(home(&app).await, 200);
    app.stop().await;
    // The same store, ana's password changed: her old session is over.
    let changed = start(vec![(
        "ana".to_owned(),
        actiongate::console::auth::hash_password("a new passphrase"),
    )])
    .await;
    assert_eq!(home(&changed).await, 303, "the password changed");
    changed.stop().await;
    // Removed from the operators: over too.
    let app = start(vec![ana.clone()]).await;
    let (cookie_again, _) = sign_in(&app).await;
    app.stop().await;
    let removed = start(vec![(
        "ben".to_owned(),
        actiongate::console::auth::hash_password("another"),
    )])
    .await;
    let status = client()
        .get(format!("{}/", removed.console_url()))
        .header("cookie", &cookie_again)
        .send()
        .await
        .unwrap()
        .status();
    assert_eq!(status, 303, "the operator was removed");
    removed.stop().await;
    // Signed out everywhere from the terminal.
    let app = start(vec![ana]).await;
    let (last, _) = sign_in(&app).await;
    let db = format!("sqlite:{}", data.join("data/actiongate.db").display());
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_actiongate"))
        .args(["approvals", "--database-url", &db, "--data-dir"])
        .arg(data.join("data"))
        .args(["sessions", "revoke", "ana"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("session(s) of ana ended"));
    let status = client()
        .get(format!("{}/", app.console_url()))
        .header("cookie", &last)
        .send()
        .await
        .unwrap()
        .status();
    assert_eq!(status, 303, "revoked");
}

/// The console answers only to its own names (DNS rebinding gets 421), builds every link
/// from data with the id percent-encoded, and exports CSV no spreadsheet reads as a
/// formula, whatever its separator.
#[tokio::test]
async fn the_console_answers_its_own_names_and_quotes_what_it_shows() {
    let app = app_with_console(Duration::from_secs(600)).await;
    let port = app.console_url().rsplit(':').next().unwrap().to_owned();
    for (host, status) in [
        ("evil.example".to_owned(), 421),
        (format!("evil.example:{port}"), 421),
        ("console.example".to_owned(), 200),
        (format!("localhost:{port}"), 200),
    ] {
        let r = client()
            .get(format!("{}/sign-in", app.console_url()))
            .header("host", &host)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), status, "{host}");
    }
    let hostile = "x;=cmd|' /C calc'!A0;/../../?notice=pwn";
    held(&app, hostile).await;
    let (cookie, _) = sign_in(&app).await;
    let get = |path: String| {
        let cookie = cookie.clone();
        async move {
            client()
                .get(path)
                .header("cookie", cookie)
                .send()
                .await
                .unwrap()
                .text()
                .await
                .unwrap()
        }
    };
    let home = get(format!("{}/", app.console_url())).await;
    assert!(
        home.contains(
            "/conversations/x%3B%3Dcmd%7C%27%20%2FC%20calc%27%21A0%3B%2F..%2F..%2F%3Fnotice%3Dpwn"
        ),
        "{home}"
    );
    let csv = get(format!(
        "{}/operations.csv?account=acct-21",
        app.console_url()
    ))
    .await;
    let row = csv
        .lines()
        .find(|l| l.contains("calc"))
        .expect("the hostile row");
    assert!(
        row.contains("\"x;=cmd|' /C calc'!A0;/../../?notice=pwn\""),
        "the cell is quoted whole: {row}"
    );
    for cell in row.split(',') {
        assert!(
            cell.starts_with('"') && cell.ends_with('"'),
            "{cell} in {row}"
        );
    }
}

/// A connection to `url`'s host and port from the loopback address `from`.
async fn connect_from(from: &str, url: &str) -> tokio::net::TcpStream {
    let addr = url.trim_start_matches("http://");
    let addr = addr.split('/').next().unwrap();
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind(format!("{from}:0").parse().unwrap()).unwrap();
    socket.connect(addr.parse().unwrap()).await.unwrap()
}

/// Sends `head` (and then `trickle`, a byte every 300 ms, if given) and reads the answer
/// until the server closes: its status line, or `None` when it closed without one.
async fn answer_to(
    mut stream: tokio::net::TcpStream,
    head: String,
    trickle: bool,
) -> (Option<String>, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let _ = stream.write_all(head.as_bytes()).await;
    let (mut read, mut write) = stream.into_split();
    let feed = async move {
        if trickle {
            loop {
                tokio::time::sleep(Duration::from_millis(300)).await;
                if write.write_all(b"x").await.is_err() {
                    break;
                }
            }
        }
        std::future::pending::<()>().await
    };
    let mut answer = Vec::new();
    tokio::select! {
        _ = read.read_to_end(&mut answer) => {}
        () = feed => {}
        () = tokio::time::sleep(Duration::from_secs(20)) => panic!("neither answered nor closed"),
    }
    let text = String::from_utf8_lossy(&answer).into_owned();
    (text.lines().next().map(str::to_owned), text)
}

/// The console and the service-events listener bound their connections as the webhook does
/// (issue 24): one more than `max_connections_per_peer` from one address is closed as it
/// opens while another address is served, and a body trickled below the minimum rate is cut
/// off with 408 after the grace (10 s), changing nothing.
#[tokio::test]
async fn the_console_and_the_events_listener_bound_crowds_and_trickles() {
    let app = spawn_app_with(
        &[
            "--events-port",
            "0",
            "--events-secret",
            "events-secret-for-tests",
        ],
        |s| {
            s.console = Some(console(Duration::from_secs(600)));
            s.server.max_connections_per_peer = 4;
        },
    )
    .await;
    let console = app.console_url();
    let events = app.events_url();
    let port_of = |url: &str| {
        url.trim_start_matches("http://")
            .split('/')
            .next()
            .unwrap()
            .to_owned()
    };
    for (url, path) in [(&console, "/sign-in"), (&events, "/v1/service-events")] {
        let host = port_of(url);
        let get = format!("GET {path} HTTP/1.1\r\nhost: {host}\r\nconnection: close\r\n\r\n");
        let mut held = Vec::new();
        for _ in 0..4 {
            held.push(connect_from("127.0.0.1", url).await);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
        let (fifth, _) = answer_to(connect_from("127.0.0.1", url).await, get.clone(), false).await;
        assert_eq!(
            fifth, None,
            "{url}: a fifth connection from one address was answered"
        );
        let (other, text) = answer_to(connect_from("127.0.0.2", url).await, get, false).await;
        assert!(
            other.is_some(),
            "{url}: another address was not served: {text}"
        );
        drop(held);
    }

    let trickled = |url: String, path: &'static str| async move {
        let host = port_of(&url);
        let head = format!(
            "POST {path} HTTP/1.1\r\nhost: {host}\r\ncontent-type: application/x-www-form-urlencoded\r\ncontent-length: 10000\r\n\r\nx"
        );
        let started = std::time::Instant::now();
        let answer = answer_to(connect_from("127.0.0.3", &url).await, head, true).await;
        (answer, started.elapsed())
    };
    let (
        ((console_status, console_text), console_took),
        ((events_status, events_text), events_took),
    ) = tokio::join!(
        trickled(console.clone(), "/sign-in"),
        trickled(events.clone(), "/v1/service-events")
    );
    assert_eq!(
        console_status.as_deref(),
        Some("HTTP/1.1 408 Request Timeout"),
        "{console_text}"
    );
    assert!(
        console_text
            .to_ascii_lowercase()
            .contains("connection: close"),
        "{console_text}"
    );
    assert_eq!(
        events_status.as_deref(),
        Some("HTTP/1.1 408 Request Timeout"),
        "{events_text}"
    );
    assert!(events_text.contains("\"too_slow\""), "{events_text}");
    for took in [console_took, events_took] {
        assert!(
            took >= Duration::from_secs(10),
            "cut off before the grace: {took:?}"
        );
    }
    // Nothing was recorded, and both still serve.
    assert!(app.store.received_events(None).await.unwrap().is_empty());
    assert!(app
        .store
        .audit_entries(None, None)
        .await
        .unwrap()
        .is_empty());
    let page = client()
        .get(format!("{console}/sign-in"))
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), 200);
}
