//! Rasa Pro's gRPC ActionService, served beside the webhook (`--grpc-port`): the consent
//! scenarios through it (each checked at the service), the statuses Rasa reads, hostile
//! input (after which the server keeps serving), the token, TLS and mutual TLS, and
//! `--grpc` alone taking the port as rasa-sdk's does.

use crate::common;

use std::time::Duration;

use actionserver::grpc_convert::{request_from_json, response_to_json};
use actionserver::grpc_proto::action_service_client::ActionServiceClient;
use actionserver::grpc_proto::{webhook_stream_event::Event, ActionsRequest, WebhookRequest};
use serde_json::{json, Value};
use tonic::codec::CompressionEncoding;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Identity};
use tonic::Code;

use common::{
    asked, assert_outcome, assert_record, outcome_of, spawn_app_with, Chat, TestApp, STYLE_BOX,
};

async fn grpc_app(extra: &[&str]) -> TestApp {
    let mut args = vec!["--grpc-port", "0"];
    args.extend_from_slice(extra);
    spawn_app_with(&args, |_| {}).await
}

async fn client(app: &TestApp) -> ActionServiceClient<Channel> {
    let channel = Channel::from_shared(app.grpc_url())
        .unwrap()
        .connect()
        .await
        .expect("the gRPC port accepts");
    // As Rasa Pro's channel: gzip both ways, no deadline.
    ActionServiceClient::new(channel)
        .send_compressed(CompressionEncoding::Gzip)
        .accept_compressed(CompressionEncoding::Gzip)
        .max_decoding_message_size(64 << 20)
}

/// Calls `action` over gRPC on the chat's tracker; the answer as the webhook's JSON, or
/// the status. A successful answer is recorded in the chat as Rasa would.
async fn call(
    grpc: &mut ActionServiceClient<Channel>,
    chat: &mut Chat,
    action: &str,
) -> Result<Value, tonic::Status> {
    let request = request_from_json(&chat.request(action));
    let answer = response_to_json(grpc.webhook(request).await?.get_ref());
    chat.record(action, &answer);
    Ok(answer)
}

/// A chat asked over gRPC: select ran through it, then the question.
async fn asked_over_grpc(grpc: &mut ActionServiceClient<Channel>, sender: &str) -> Chat {
    let mut c = Chat::new(sender, Some("acct-7"));
    c.user(
        "please stop_renewal on WS-SUB-3304",
        "request_change",
        &[("subscription", STYLE_BOX), ("change_type", "stop_renewal")],
    );
    call(grpc, &mut c, "select_subscription_change")
        .await
        .unwrap();
    assert_eq!(c.slots["change_tag"], json!("WS-SUB-3304 stop_renewal r4"));
    c.ask_confirmation();
    c
}

#[tokio::test]
async fn a_confirmed_change_is_applied_once_and_a_duplicate_delivery_replays_it() {
    let app = grpc_app(&[]).await;
    let mut grpc = client(&app).await;
    let mut c = asked_over_grpc(&mut grpc, "grpc-yes").await;
    c.user("yes", "affirm", &[]);
    let request = request_from_json(&c.request("apply_subscription_change"));
    let first = response_to_json(grpc.webhook(request.clone()).await.unwrap().get_ref());
    assert_outcome(&outcome_of(&first), "applied", None);
    assert_record(&app, STYLE_BOX, 5, "ending").await;
    // Rasa Pro redelivers the same call: the first outcome, no second change.
    let again = response_to_json(grpc.webhook(request).await.unwrap().get_ref());
    assert_eq!(outcome_of(&again), outcome_of(&first));
    assert_record(&app, STYLE_BOX, 5, "ending").await;
    // The same "yes" through the webhook: the same operation, still one change.
    let (status, body) = app.webhook(&c.request("apply_subscription_change")).await;
    assert_eq!(status, 200);
    assert_eq!(outcome_of(&body)["status"], "applied");
    assert_record(&app, STYLE_BOX, 5, "ending").await;
}

#[tokio::test]
async fn a_stale_confirmation_is_blocked_with_the_current_terms_and_nothing_changes() {
    let app = grpc_app(&[]).await;
    let mut grpc = client(&app).await;
    let mut c = asked_over_grpc(&mut grpc, "grpc-stale").await;
    app.charge_october_box_early().await;
    c.user("yes", "affirm", &[]);
    let answer = call(&mut grpc, &mut c, "apply_subscription_change")
        .await
        .unwrap();
    let outcome = outcome_of(&answer);
    assert_outcome(&outcome, "blocked", Some("benefit_loss_hidden"));
    assert_eq!(outcome["current"]["tag"], "WS-SUB-3304 stop_renewal r5");
    assert_record(&app, STYLE_BOX, 5, "active").await;
}

#[tokio::test]
async fn a_no_is_declined_and_nothing_changes() {
    let app = grpc_app(&[]).await;
    let mut grpc = client(&app).await;
    let mut c = asked_over_grpc(&mut grpc, "grpc-no").await;
    c.user("no", "deny", &[]);
    let answer = call(&mut grpc, &mut c, "apply_subscription_change")
        .await
        .unwrap();
    assert_outcome(&outcome_of(&answer), "blocked", Some("declined"));
    assert_record(&app, STYLE_BOX, 4, "active").await;
}

/// Issue 22's replies over gRPC answer as over the webhook: a negated reply the NLU read as
/// `affirm`, a low-confidence yes and a yes after a reminder change nothing; a click on the
/// question's Yes button makes the change once.
#[tokio::test]
async fn the_reply_is_read_the_same_over_grpc() {
    let app = grpc_app(&[]).await;
    let mut grpc = client(&app).await;
    let mut c = asked_over_grpc(&mut grpc, "grpc-negated").await;
    c.user("No, don't do it", "affirm", &[]);
    let answer = call(&mut grpc, &mut c, "apply_subscription_change")
        .await
        .unwrap();
    let outcome = outcome_of(&answer);
    assert_outcome(&outcome, "blocked", Some("not_confirmed"));
    assert!(outcome["why"].as_str().unwrap().contains("\"no\" negates"));
    assert_record(&app, STYLE_BOX, 4, "active").await;

    let mut c = asked_over_grpc(&mut grpc, "grpc-unsure").await;
    c.user("yes", "affirm", &[]);
    let at = c.events.len() - 2;
    c.events[at]["parse_data"]["intent"]["confidence"] = json!(0.5);
    let answer = call(&mut grpc, &mut c, "apply_subscription_change")
        .await
        .unwrap();
    assert_outcome(&outcome_of(&answer), "blocked", Some("not_confirmed"));
    assert_record(&app, STYLE_BOX, 4, "active").await;

    let mut c = asked_over_grpc(&mut grpc, "grpc-reminded").await;
    c.bot("Are you still there?", Some("utter_still_there"));
    c.user("yes", "affirm", &[]);
    let answer = call(&mut grpc, &mut c, "apply_subscription_change")
        .await
        .unwrap();
    assert_outcome(&outcome_of(&answer), "blocked", Some("not_answered"));
    assert_record(&app, STYLE_BOX, 4, "active").await;

    let mut c = asked_over_grpc(&mut grpc, "grpc-button").await;
    c.user("/affirm", "affirm", &[]);
    let answer = call(&mut grpc, &mut c, "apply_subscription_change")
        .await
        .unwrap();
    assert_outcome(&outcome_of(&answer), "applied", None);
    assert_record(&app, STYLE_BOX, 5, "ending").await;
}

/// A template showing a float slot whose value is whole (a price of 12.0): Rasa renders
/// "12.0"; over gRPC the value is only a double, which reads back as 12. Either rendering
/// of the same number is the question Rasa sent, so the yes is not refused.
#[tokio::test]
async fn a_whole_float_in_the_question_reads_the_same_over_grpc() {
    let app = grpc_app(&[]).await;
    let mut grpc = client(&app).await;
    let mut c = Chat::new("grpc-price", Some("acct-7"));
    c.slot("price", json!(12.0));
    c.user(
        "please stop_renewal on WS-SUB-3304",
        "request_change",
        &[("subscription", STYLE_BOX), ("change_type", "stop_renewal")],
    );
    call(&mut grpc, &mut c, "select_subscription_change")
        .await
        .unwrap();
    let text = format!("{} Price: 12.0.", c.confirmation_text());
    c.ask(&text);
    c.user("yes", "affirm", &[]);
    let mut request = c.request("apply_subscription_change");
    let variation = &mut request["domain"]["responses"]["utter_confirm_subscription_change"][0];
    let template = format!("{} Price: {{price}}.", variation["text"].as_str().unwrap());
    variation["text"] = json!(template);
    request["domain"]["slots"] = json!({"price": {"type": "float"}});
    let answer = response_to_json(
        grpc.webhook(request_from_json(&request))
            .await
            .unwrap()
            .get_ref(),
    );
    assert_outcome(&outcome_of(&answer), "applied", None);
    assert_record(&app, STYLE_BOX, 5, "ending").await;
}

#[tokio::test]
async fn the_same_actions_as_the_webhook_and_rasa_sdks_statuses() {
    let app = grpc_app(&[]).await;
    let mut grpc = client(&app).await;
    let listed = grpc.actions(ActionsRequest {}).await.unwrap();
    let names: Vec<Value> = listed
        .get_ref()
        .actions
        .iter()
        .map(|s| actionserver::grpc_convert::struct_to_json(s)["name"].clone())
        .collect();
    let (_, http) = {
        let r = app
            .http
            .get(format!("{}/actions", app.url))
            .send()
            .await
            .unwrap();
        (r.status(), r.json::<Vec<Value>>().await.unwrap())
    };
    let http: Vec<Value> = http.into_iter().map(|a| a["name"].clone()).collect();
    assert_eq!(names, http);
    // An unknown action: NOT_FOUND, with rasa-sdk's ResourceNotFound in the message.
    let c = Chat::new("grpc-unknown", Some("acct-7"));
    let status = grpc
        .webhook(request_from_json(&c.request("no_such_action")))
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::NotFound);
    let details: Value = serde_json::from_str(status.message()).unwrap();
    assert_eq!(
        details,
        json!({"action_name": "no_such_action", "resource_type": "ACTION",
               "message": "No registered action found for name 'no_such_action'."})
    );
    // No next action: an empty answer, as rasa-sdk's.
    let empty = grpc.webhook(WebhookRequest::default()).await.unwrap();
    assert!(empty.get_ref().events.is_empty() && empty.get_ref().responses.is_empty());
    // WebhookStream: a non-streaming action's answer as the final result.
    let mut c = asked(&app, "grpc-stream").await;
    c.user("maybe", "chitchat", &[]);
    let mut stream = grpc
        .webhook_stream(request_from_json(&c.request("apply_subscription_change")))
        .await
        .unwrap()
        .into_inner();
    let first = stream.message().await.unwrap().expect("one event");
    match first.event {
        Some(Event::FinalResult(result)) => {
            let answer = response_to_json(&result);
            assert_outcome(&outcome_of(&answer), "blocked", Some("not_confirmed"));
        }
        other => panic!("{other:?}"),
    }
    assert!(stream.message().await.unwrap().is_none(), "then the end");
    assert_record(&app, STYLE_BOX, 4, "active").await;
    // An unknown action on the stream: an error event, then NOT_FOUND.
    let mut stream = grpc
        .webhook_stream(request_from_json(&c.request("no_such_action")))
        .await
        .unwrap()
        .into_inner();
    let first = stream.message().await.unwrap().expect("the error event");
    assert!(matches!(first.event, Some(Event::Error(ref e)) if e.action_name == "no_such_action"));
    assert_eq!(stream.message().await.unwrap_err().code(), Code::NotFound);
    grpc.ack_stream_chunks(actionserver::grpc_proto::StreamChunkAck {
        response_id: "r1".into(),
    })
    .await
    .expect("acknowledging succeeds");
}

#[tokio::test]
async fn hostile_input_gets_a_clear_status_and_the_server_keeps_serving() {
    let app = grpc_app(&["--decompressed-limit", "2000000"]).await;
    let mut grpc = client(&app).await;
    let serves = |grpc: &mut ActionServiceClient<Channel>| {
        let mut grpc = grpc.clone();
        async move {
            let listed = grpc.actions(ActionsRequest {}).await.unwrap();
            assert_eq!(listed.get_ref().actions.len(), 5);
        }
    };
    // A tracker of the wrong shape: an event that is not an event.
    let mut c = Chat::new("grpc-shape", Some("acct-7"));
    c.events.push(json!({"timestamp": 1.0, "name": 7}));
    let status = grpc
        .webhook(request_from_json(&c.request("apply_subscription_change")))
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
    serves(&mut grpc).await;
    // A value of the wrong type: the error says where, never what the customer wrote.
    let c = Chat::new("grpc-echo", Some("acct-7"));
    let mut body = c.request("apply_subscription_change");
    body["tracker"]["active_loop"] =
        json!({"name": "form", "is_interrupted": "my card is 4111 1111 1111 1111"});
    let status = grpc.webhook(request_from_json(&body)).await.unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
    assert!(
        status.message().contains("invalid request") && !status.message().contains("4111"),
        "{status:?}"
    );
    serves(&mut grpc).await;
    // A message past the limit, sent plainly: refused.
    let mut big = Chat::new("grpc-big", Some("acct-7"));
    big.user(&"x".repeat(3_000_000), "chitchat", &[]);
    let plain = ActionServiceClient::new(
        Channel::from_shared(app.grpc_url())
            .unwrap()
            .connect()
            .await
            .unwrap(),
    );
    let status = plain
        .clone()
        .webhook(request_from_json(&big.request("apply_subscription_change")))
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::OutOfRange, "{status:?}");
    serves(&mut grpc).await;
    // A gzip bomb: 64 MB of one letter, a few dozen KB on the wire. Refused after
    // decompression reaches the limit, not after it fills memory.
    let mut bomb = Chat::new("grpc-bomb", Some("acct-7"));
    bomb.user(&"a".repeat(64 << 20), "chitchat", &[]);
    let status = grpc
        .clone()
        .webhook(request_from_json(
            &bomb.request("apply_subscription_change"),
        ))
        .await
        .unwrap_err();
    assert!(
        matches!(status.code(), Code::OutOfRange | Code::ResourceExhausted),
        "{status:?}"
    );
    serves(&mut grpc).await;
    assert_record(&app, STYLE_BOX, 4, "active").await;
}

/// A call with `key: value` in its metadata.
fn with_metadata<T>(message: T, key: &'static str, value: &str) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    request
        .metadata_mut()
        .insert(key, value.parse().expect("ASCII metadata"));
    request
}

#[tokio::test]
async fn without_the_token_nothing_runs() {
    let app = grpc_app(&["--auth-token", "s3cret"]).await;
    let mut grpc = client(&app).await;
    let status = grpc.actions(ActionsRequest {}).await.unwrap_err();
    assert_eq!(status.code(), Code::Unauthenticated);
    // Asked, with the token as Rasa passes the endpoint's headers: as metadata.
    let mut c = Chat::new("grpc-token", Some("acct-7"));
    c.user(
        "please stop_renewal on WS-SUB-3304",
        "request_change",
        &[("subscription", STYLE_BOX), ("change_type", "stop_renewal")],
    );
    let select = request_from_json(&c.request("select_subscription_change"));
    let answer = grpc
        .webhook(with_metadata(select, "token", "s3cret"))
        .await
        .unwrap();
    c.record(
        "select_subscription_change",
        &response_to_json(answer.get_ref()),
    );
    c.ask_confirmation();
    c.user("yes", "affirm", &[]);
    let apply = request_from_json(&c.request("apply_subscription_change"));
    for wrong in [
        tonic::Request::new(apply.clone()),
        with_metadata(apply.clone(), "authorization", "Bearer nope"),
        with_metadata(apply.clone(), "token", "s3cre"),
    ] {
        assert_eq!(
            grpc.webhook(wrong).await.unwrap_err().code(),
            Code::Unauthenticated
        );
    }
    // Every method but health: the stream and the acknowledgement too.
    assert_eq!(
        grpc.webhook_stream(apply.clone()).await.unwrap_err().code(),
        Code::Unauthenticated
    );
    assert_eq!(
        grpc.ack_stream_chunks(actionserver::grpc_proto::StreamChunkAck::default())
            .await
            .unwrap_err()
            .code(),
        Code::Unauthenticated
    );
    assert_record(&app, STYLE_BOX, 4, "active").await;
    let metrics = app
        .http
        .get(format!("{}/metrics", app.url))
        .bearer_auth("s3cret")
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics
            .lines()
            .any(|l| l.contains("route=\"grpc\"") && l.contains("status=\"401\"")),
        "refused calls are counted as 401s: {metrics}"
    );
    for (key, value) in [("token", "s3cret"), ("authorization", "Bearer s3cret")] {
        let listed = grpc
            .actions(with_metadata(ActionsRequest {}, key, value))
            .await
            .unwrap();
        assert_eq!(listed.get_ref().actions.len(), 5);
    }
    let answer = grpc
        .webhook(with_metadata(apply, "authorization", "Bearer s3cret"))
        .await
        .unwrap();
    assert_outcome(
        &outcome_of(&response_to_json(answer.get_ref())),
        "applied",
        None,
    );
    assert_record(&app, STYLE_BOX, 5, "ending").await;
}

#[tokio::test]
async fn tls_and_mutual_tls_over_grpc() {
    let dir = tempfile::tempdir().unwrap();
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let ca_cert =
        rcgen::CertifiedIssuer::self_signed(ca_params, rcgen::KeyPair::generate().unwrap())
            .unwrap();
    let leaf = |names: Vec<String>| {
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(names)
            .unwrap()
            .signed_by(&key, &ca_cert)
            .unwrap();
        (cert.pem(), key.serialize_pem())
    };
    let (server_cert, server_key) = leaf(vec!["localhost".into()]);
    let (client_cert, client_key) = leaf(vec!["rasa".into()]);
    let write = |name: &str, text: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path.display().to_string()
    };
    let (cert_path, key_path, ca_path) = (
        write("server.pem", &server_cert),
        write("server.key", &server_key),
        write("ca.pem", &ca_cert.pem()),
    );
    let app = grpc_app(&[
        "--ssl-certificate",
        &cert_path,
        "--ssl-keyfile",
        &key_path,
        "--ssl-ca-file",
        &ca_path,
    ])
    .await;
    let url = app
        .grpc_url()
        .replace("http://127.0.0.1", "https://localhost");
    let tls = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(ca_cert.pem()))
        .domain_name("localhost");
    // Rasa with `cafile`, `ssl_client_cert` and `ssl_client_key`: served.
    let channel = Channel::from_shared(url.clone())
        .unwrap()
        .tls_config(
            tls.clone()
                .identity(Identity::from_pem(&client_cert, &client_key)),
        )
        .unwrap()
        .connect()
        .await
        .expect("mutual TLS");
    let listed = ActionServiceClient::new(channel)
        .actions(ActionsRequest {})
        .await
        .unwrap();
    assert_eq!(listed.get_ref().actions.len(), 5);
    // Without a client certificate: refused at the handshake, or at the first call.
    let refused = async {
        let channel = Channel::from_shared(url.clone())
            .unwrap()
            .tls_config(tls.clone())
            .unwrap()
            .connect()
            .await?;
        ActionServiceClient::new(channel)
            .actions(ActionsRequest {})
            .await
            .map_err(|e| Box::new(e) as Box<dyn std::error::Error>)?;
        Ok::<(), Box<dyn std::error::Error>>(())
    };
    assert!(
        tokio::time::timeout(Duration::from_secs(10), refused)
            .await
            .unwrap()
            .is_err(),
        "a client without a certificate is refused"
    );
    // Plain text to the TLS port: refused.
    let plain = Channel::from_shared(app.grpc_url())
        .unwrap()
        .connect()
        .await;
    if let Ok(channel) = plain {
        assert!(ActionServiceClient::new(channel)
            .actions(ActionsRequest {})
            .await
            .is_err());
    }
}

#[tokio::test]
async fn grpc_alone_takes_the_port_as_rasa_sdks_does() {
    let dir = tempfile::tempdir().unwrap();
    let settings = common::test_settings(dir.path(), &["--grpc"]);
    let started = actiongate::app::start(&settings).await.unwrap();
    assert!(started.http.is_none(), "no webhook on the port");
    let grpc = started.grpc.expect("gRPC on the port");
    assert_eq!(grpc.port, started.port);
    let channel = Channel::from_shared(format!("http://127.0.0.1:{}", started.port))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let listed = ActionServiceClient::new(channel)
        .actions(ActionsRequest {})
        .await
        .unwrap();
    assert_eq!(listed.get_ref().actions.len(), 5);
    let http = reqwest::get(format!("http://127.0.0.1:{}/health", started.port)).await;
    assert!(
        http.map_or(true, |r| !r.status().is_success()),
        "the webhook is not served there"
    );
    grpc.stop();
    tokio::time::timeout(Duration::from_secs(10), grpc.stopped())
        .await
        .expect("stops when told")
        .unwrap();
}

#[tokio::test]
async fn mutual_tls_without_a_certificate_refuses_to_start() {
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("ca.pem");
    std::fs::write(&ca, "not used").unwrap();
    let endpoints = dir.path().join("endpoints.yml");
    std::fs::write(
        &endpoints,
        format!(
            "actiongate:\n  server:\n    grpc: true\n    ssl_ca_file: {}\n",
            ca.display()
        ),
    )
    .unwrap();
    let data = dir.path().join("data");
    let cli = <actiongate::cli::Cli as clap::Parser>::parse_from([
        "actiongate",
        "--endpoints",
        endpoints.to_str().unwrap(),
        "--port",
        "0",
        "--embedded-service-port",
        "0",
        "--data-dir",
        data.to_str().unwrap(),
    ]);
    let mut settings = actiongate::config::Settings::resolve(&cli.serve).unwrap();
    settings.server.handle_signals = false;
    let error = actiongate::app::start(&settings)
        .await
        .err()
        .expect("refused");
    assert!(error.to_string().contains("ssl_ca_file"), "{error}");
}

#[test]
fn grpc_on_the_port_and_beside_it_at_once_is_a_configuration_error() {
    let dir = tempfile::tempdir().unwrap();
    let endpoints = dir.path().join("endpoints.yml");
    std::fs::write(
        &endpoints,
        "actiongate:\n  server:\n    grpc: true\n    grpc_port: 5057\n",
    )
    .unwrap();
    let cli = <actiongate::cli::Cli as clap::Parser>::parse_from([
        "actiongate",
        "--endpoints",
        endpoints.to_str().unwrap(),
    ]);
    let error = actiongate::config::Settings::resolve(&cli.serve).unwrap_err();
    assert_eq!(error.key, "actiongate.server.grpc_port");
    std::fs::write(&endpoints, "actiongate:\n  server:\n    grpc_port: 5057\n").unwrap();
    let settings = actiongate::config::Settings::resolve(&cli.serve).unwrap();
    assert_eq!(settings.grpc, actiongate::config::GrpcMode::Beside(5057));
}

/// A connection that never speaks is closed after the first-bytes limit (issue 24: silent
/// connections kept for minutes exhausted the descriptors of every listener), and a call
/// still goes through.
#[tokio::test]
async fn a_silent_connection_to_the_grpc_port_is_closed() {
    use tokio::io::AsyncReadExt;
    let app = spawn_app_with(&["--grpc-port", "0"], |s| {
        s.server.first_bytes = Duration::from_millis(300);
    })
    .await;
    let addr = app.grpc_url().trim_start_matches("http://").to_owned();
    let mut silent = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let mut byte = [0u8; 1];
    let read = tokio::time::timeout(Duration::from_secs(5), silent.read(&mut byte)).await;
    assert!(
        matches!(read, Ok(Ok(0)) | Ok(Err(_))),
        "the silent connection is still open: {read:?}"
    );
    let mut grpc = client(&app).await;
    let listed = grpc.actions(ActionsRequest {}).await.unwrap();
    assert_eq!(listed.get_ref().actions.len(), 5);
}

/// The gRPC port holds at most `max_connections_per_peer` from one address (the setting
/// the HTTP listeners use too): one more from there is closed at once, while another
/// address may still connect.
#[tokio::test]
async fn the_grpc_port_caps_connections_from_one_address() {
    use tokio::io::AsyncReadExt;
    let app = spawn_app_with(&["--grpc-port", "0"], |s| {
        s.server.max_connections_per_peer = 2;
    })
    .await;
    let addr: std::net::SocketAddr = app
        .grpc_url()
        .trim_start_matches("http://")
        .parse()
        .unwrap();
    let from = |ip: &str| {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.bind(format!("{ip}:0").parse().unwrap()).unwrap();
        socket.connect(addr)
    };
    // Closed within a second (end of stream or a reset), or still open after it.
    async fn closed_soon(stream: &mut tokio::net::TcpStream) -> bool {
        let mut byte = [0u8; 1];
        let read = tokio::time::timeout(Duration::from_secs(1), stream.read(&mut byte)).await;
        matches!(read, Ok(Ok(0)) | Ok(Err(_)))
    }
    let mut held = [
        from("127.0.0.1").await.unwrap(),
        from("127.0.0.1").await.unwrap(),
    ];
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut third = from("127.0.0.1").await.unwrap();
    assert!(
        closed_soon(&mut third).await,
        "a third connection from one address was kept"
    );
    let mut other = from("127.0.0.2").await.unwrap();
    assert!(
        !closed_soon(&mut other).await,
        "another address was refused"
    );
    assert!(
        !closed_soon(&mut held[0]).await,
        "a connection within the cap was closed"
    );
}

/// Readiness (issue 27): the gRPC health service says SERVING while the store answers and
/// NOT_SERVING once it does not, and the webhook's `/ready` says why; `/health` stays the
/// cheap liveness check.
#[tokio::test]
async fn health_follows_the_store_and_ready_says_why() {
    use tonic_health::pb::health_check_response::ServingStatus;
    use tonic_health::pb::health_client::HealthClient;
    use tonic_health::pb::HealthCheckRequest;
    let dir = tempfile::tempdir().unwrap();
    let settings = common::test_settings(dir.path(), &["--grpc-port", "0"]);
    let mut started = actiongate::app::start(&settings).await.unwrap();
    let webhook = started.http.take().expect("the webhook on the port");
    let webhook_handle = webhook.handle();
    tokio::spawn(webhook);
    let grpc = started.grpc.as_ref().expect("gRPC beside the webhook");
    let channel = Channel::from_shared(format!("http://127.0.0.1:{}", grpc.port))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let health = HealthClient::new(channel);
    let status = |service: &'static str| {
        let mut health = health.clone();
        async move {
            health
                .check(HealthCheckRequest {
                    service: service.to_owned(),
                })
                .await
                .unwrap()
                .into_inner()
                .status()
        }
    };
    let until = |wanted: ServingStatus| async move {
        for _ in 0..50 {
            if status("ActionServer").await == wanted && status("").await == wanted {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        false
    };
    assert!(until(ServingStatus::Serving).await, "never SERVING");
    let ready = reqwest::get(format!("http://127.0.0.1:{}/ready", started.port))
        .await
        .unwrap();
    assert_eq!(ready.status(), 200);

    // Closed (new uses fail at once; the close itself waits for connections in use).
    let store = started.store.clone();
    tokio::spawn(async move { store.close().await });
    assert!(
        until(ServingStatus::NotServing).await,
        "still SERVING without a store"
    );
    let ready = reqwest::get(format!("http://127.0.0.1:{}/ready", started.port))
        .await
        .unwrap();
    assert_eq!(ready.status(), 503);
    let body: Value = ready.json().await.unwrap();
    assert_eq!(body["status"], "not_ready");
    assert_eq!(body["reason"], "the store cannot be reached");
    let live = reqwest::get(format!("http://127.0.0.1:{}/health", started.port))
        .await
        .unwrap();
    assert_eq!(live.status(), 200, "liveness does not depend on the store");
    grpc.stop();
    webhook_handle.stop(false).await;
}
