//! The README's example (examples/greet.rs), served on port 0 and called as Rasa calls it.

#[path = "../../examples/greet.rs"]
mod greet;

use actionserver::{Registry, ServerSettings};
use serde_json::{json, Value};

#[tokio::test]
async fn the_readme_example_answers_rasa() {
    // In the workspace, reqwest is built without a TLS provider of its own (the product
    // chooses ring); install it, though nothing here uses TLS.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut registry = Registry::default();
    registry.register(greet::Greet).unwrap();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://127.0.0.1:{}", listener.local_addr().unwrap().port());
    let settings = ServerSettings {
        handle_signals: false,
        workers: 1,
        ..ServerSettings::default()
    };
    let server = actionserver::serve(listener, registry, settings, None).unwrap();
    let handle = server.handle();
    tokio::spawn(server);
    let http = reqwest::Client::new();
    let actions: Value = http
        .get(format!("{url}/actions"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(actions, json!([{"name": "action_greet"}]));
    let body = json!({
        "next_action": "action_greet",
        "sender_id": "s",
        "tracker": {"sender_id": "s", "slots": {"name": "Ada"}, "events": []},
        "version": "3.6.21",
    });
    let answer: Value = http
        .post(format!("{url}/webhook"))
        .json(&body)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(answer["responses"][0]["text"], "Hello, Ada!");
    assert_eq!(
        answer["events"],
        json!([{"event": "slot", "timestamp": null, "name": "greeted", "value": true}])
    );
    // A second action of the same name is refused.
    let mut again = Registry::default();
    again.register(greet::Greet).unwrap();
    assert!(again.register(greet::Greet).is_err());
    handle.stop(false).await;
}
