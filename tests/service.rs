//! The embedded subscription service's HTTP contract (CONTRACT.md section 6), over real
//! HTTP: records, ETags, the command's preconditions and idempotency, the administration
//! route, and records surviving a restart.

use std::time::Duration;

use actiongate::subscriptions::embedded::{self, ServiceSettings, DEMO_DATA};
use serde_json::{json, Value};

async fn start(
    dir: &std::path::Path,
    token: Option<&str>,
) -> (String, actix_web::dev::ServerHandle) {
    actiongate::telemetry::install_crypto();
    let running = embedded::start(
        0,
        ServiceSettings {
            database: dir.join("subscriptions.db"),
            seed: Some(DEMO_DATA.to_owned()),
            token: token.map(str::to_owned),
            command_delay: Duration::ZERO,
            faults: Default::default(),
        },
    )
    .await
    .unwrap();
    (format!("http://127.0.0.1:{}", running.port), running.handle)
}

async fn command(
    url: &str,
    id: &str,
    if_match: Option<&str>,
    key: Option<&str>,
    change_type: &str,
) -> reqwest::Response {
    let mut request = reqwest::Client::new()
        .post(format!("{url}/v1/subscriptions/{id}/changes"))
        .json(&json!({"change_type": change_type}));
    if let Some(v) = if_match {
        request = request.header("If-Match", v);
    }
    if let Some(k) = key {
        request = request.header("Idempotency-Key", k);
    }
    request.send().await.unwrap()
}

#[tokio::test]
async fn records_etags_and_the_accounts_own_list() {
    let dir = tempfile::tempdir().unwrap();
    let (url, _) = start(dir.path(), None).await;
    let r = reqwest::get(format!("{url}/v1/subscriptions/WS-SUB-3304"))
        .await
        .unwrap();
    assert_eq!(r.headers()["etag"], "\"r4\"");
    let record: Value = r.json().await.unwrap();
    assert_eq!(record["options"][0]["effective_at"], "2027-01-01T00:00:00Z");
    assert_eq!(
        reqwest::get(format!("{url}/v1/subscriptions/nope"))
            .await
            .unwrap()
            .status(),
        404
    );
    let list: Vec<Value> = reqwest::get(format!("{url}/v1/accounts/acct-7/subscriptions"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(list.iter().all(|s| s["account"] == "acct-7") && list.len() == 2);
}

#[tokio::test]
async fn commands_need_preconditions_and_are_idempotent() {
    let dir = tempfile::tempdir().unwrap();
    let (url, _) = start(dir.path(), None).await;
    assert_eq!(
        command(&url, "WS-SUB-3304", None, Some("k"), "stop_renewal")
            .await
            .status(),
        428
    );
    assert_eq!(
        command(&url, "WS-SUB-3304", Some("\"r4\""), None, "stop_renewal")
            .await
            .status(),
        428
    );
    let stale = command(
        &url,
        "WS-SUB-3304",
        Some("\"r3\""),
        Some("k0"),
        "stop_renewal",
    )
    .await;
    assert_eq!(stale.status(), 412);
    assert_eq!(
        stale.json::<Value>().await.unwrap()["revision"],
        4,
        "412 carries the current record"
    );
    let made = command(
        &url,
        "WS-SUB-3304",
        Some("\"r4\""),
        Some("k1"),
        "stop_renewal",
    )
    .await;
    assert_eq!(made.status(), 201);
    let change: Value = made.json().await.unwrap();
    assert_eq!(
        (change["status"].as_str(), change["revision"].as_i64()),
        (Some("scheduled"), Some(5))
    );
    let replay = command(
        &url,
        "WS-SUB-3304",
        Some("\"r4\""),
        Some("k1"),
        "stop_renewal",
    )
    .await;
    assert_eq!(replay.status(), 200);
    assert_eq!(replay.headers()["idempotent-replayed"], "true");
    assert_eq!(
        replay.json::<Value>().await.unwrap(),
        change,
        "the first answer, replayed"
    );
    assert_eq!(
        command(
            &url,
            "WS-SUB-3304",
            Some("\"r5\""),
            Some("k1"),
            "skip_next_box"
        )
        .await
        .status(),
        422
    );
    assert_eq!(
        command(
            &url,
            "WS-SUB-3310",
            Some("\"r2\""),
            Some("k2"),
            "no_such_change"
        )
        .await
        .status(),
        422
    );
    let found: Value = reqwest::get(format!("{url}/v1/changes/k1"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(found, change);
    assert_eq!(
        reqwest::get(format!("{url}/v1/changes/k0"))
            .await
            .unwrap()
            .status(),
        404
    );
    let record: Value = reqwest::get(format!("{url}/v1/subscriptions/WS-SUB-3304"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(record["revision"], 5, "one change, one revision");
}

#[tokio::test]
async fn the_administration_route_sets_the_next_revision_and_records_survive_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let (url, handle) = start(dir.path(), None).await;
    let mut record: Value = reqwest::get(format!("{url}/v1/subscriptions/WS-SUB-3304"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    record.as_object_mut().unwrap().remove("revision");
    record["notes"]
        .as_array_mut()
        .unwrap()
        .push(json!({"at": "2026-09-30T08:00:00Z", "text": "Charged early."}));
    let http = reqwest::Client::new();
    let put: Value = http
        .put(format!("{url}/v1/subscriptions/WS-SUB-3304"))
        .json(&record)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(put["revision"], 5);
    assert_eq!(
        put["notes"].as_array().unwrap().last().unwrap()["revision"],
        5,
        "a new note names the revision it produced"
    );
    let mut new = record.clone();
    new["id"] = json!("WS-SUB-9999");
    let created: Value = http
        .put(format!("{url}/v1/subscriptions/WS-SUB-9999"))
        .json(&new)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(created["revision"], 1);
    assert_eq!(
        http.put(format!("{url}/v1/subscriptions/WS-SUB-1"))
            .json(&new)
            .send()
            .await
            .unwrap()
            .status(),
        422,
        "the body's id is the path's"
    );
    handle.stop(true).await;
    let (url, _) = start(dir.path(), None).await;
    let again: Value = reqwest::get(format!("{url}/v1/subscriptions/WS-SUB-3304"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        again["revision"], 5,
        "records survive a restart (and the seed does not overwrite them)"
    );
}

#[tokio::test]
async fn a_configured_token_is_required() {
    let dir = tempfile::tempdir().unwrap();
    let (url, _) = start(dir.path(), Some("svc")).await;
    let http = reqwest::Client::new();
    assert_eq!(
        http.get(format!("{url}/v1/subscriptions/WS-SUB-3304"))
            .send()
            .await
            .unwrap()
            .status(),
        401
    );
    let ok = http
        .get(format!("{url}/v1/subscriptions/WS-SUB-3304"))
        .bearer_auth("svc")
        .send()
        .await
        .unwrap();
    assert_eq!(ok.status(), 200);
}
