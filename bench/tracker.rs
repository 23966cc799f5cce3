//! Criterion benchmarks: parsing a webhook body, computing the applied events, and
//! reading the conversation (the confirmation lookup) at 10, 1,000 and 10,000 events.
//! The figures should grow linearly with the number of events.

use criterion::{black_box, criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use serde_json::{json, Value};

use actiongate::conversation;
use actionserver::WebhookRequest;

/// A webhook body with `n` events, made of the events of a real Rasa 3.6.21 request
/// (tests/fixtures/rasa-3.6.21/apply_request.json) repeated, key order and all.
fn body(n: usize) -> String {
    let fixture: Value = serde_json::from_str(include_str!(
        "../tests/fixtures/rasa-3.6.21/apply_request.json"
    ))
    .unwrap();
    #[derive(serde::Deserialize)]
    struct Raw<'a> {
        #[serde(borrow)]
        tracker: RawTracker<'a>,
    }
    #[derive(serde::Deserialize)]
    struct RawTracker<'a> {
        #[serde(borrow)]
        events: Vec<&'a serde_json::value::RawValue>,
    }
    let text = include_str!("../tests/fixtures/rasa-3.6.21/apply_request.json");
    let raw: Raw = serde_json::from_str(text).unwrap();
    // Skip the session start: one session, a long conversation.
    let turn: Vec<&str> = raw.tracker.events[4..].iter().map(|e| e.get()).collect();
    let events: Vec<&str> = turn.iter().copied().cycle().take(n).collect();
    let mut body = json!({"next_action": "apply_subscription_change", "sender_id": "bench", "version": "3.6.21",
        "domain": fixture["domain"].clone(),
        "tracker": {"sender_id": "bench", "slots": fixture["tracker"]["slots"].clone(), "events": [],
        "latest_message": fixture["tracker"]["latest_message"].clone(), "paused": false, "active_loop": {}}})
    .to_string();
    let at = body.find(r#""events":[]"#).unwrap() + r#""events":["#.len();
    body.insert_str(at, &events.join(", "));
    // The probe that recorded the fixture prefixed its action names; ours are unprefixed.
    body.replace(
        "action_select_subscription_change",
        "select_subscription_change",
    )
}

fn benches(c: &mut Criterion) {
    let sizes = [10usize, 1_000, 10_000];
    let bodies: Vec<(usize, String)> = sizes.iter().map(|&n| (n, body(n))).collect();

    let mut group = c.benchmark_group("parse");
    for (n, text) in &bodies {
        group.throughput(Throughput::Elements(*n as u64));
        group.bench_with_input(BenchmarkId::from_parameter(n), text, |b, text| {
            b.iter(|| serde_json::from_str::<WebhookRequest>(black_box(text)).unwrap())
        });
    }
    group.finish();

    let parsed: Vec<(usize, WebhookRequest)> = bodies
        .iter()
        .map(|(n, text)| (*n, serde_json::from_str(text).unwrap()))
        .collect();
    let mut group = c.benchmark_group("applied_events");
    for (n, request) in &parsed {
        group.throughput(Throughput::Elements(*n as u64));
        let tracker = request.tracker.as_ref().unwrap();
        group.bench_with_input(BenchmarkId::from_parameter(n), tracker, |b, tracker| {
            b.iter(|| black_box(tracker.applied_events()).len())
        });
    }
    group.finish();

    let signals = conversation::Signals::default();
    let reading = conversation::Reading {
        confirm_response: "utter_confirm_subscription_change",
        select_action: "select_subscription_change",
        signals: &signals,
    };
    let mut group = c.benchmark_group("confirmation_lookup");
    for (n, request) in &parsed {
        group.throughput(Throughput::Elements(*n as u64));
        let tracker = request.tracker.as_ref().unwrap();
        group.bench_with_input(BenchmarkId::from_parameter(n), tracker, |b, tracker| {
            b.iter(|| {
                let events = tracker.session_events();
                conversation::read(&events, &reading).unwrap()
            })
        });
    }
    group.finish();
}

criterion_group! {
    name = tracker;
    config = Criterion::default().sample_size(20).measurement_time(std::time::Duration::from_secs(2)).warm_up_time(std::time::Duration::from_millis(500));
    targets = benches
}
criterion_main!(tracker);
