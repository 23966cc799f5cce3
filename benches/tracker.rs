//! Criterion benchmarks: parsing a webhook body, computing the applied events, and
//! reading the conversation (the confirmation lookup) at 10, 1,000 and 10,000 events.
//! The figures should grow linearly with the number of events.

use criterion::{black_box, criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use serde_json::{json, Value};

use actiongate::conversation;
use actiongate::protocol::WebhookRequest;

/// A webhook body shaped like Rasa 3.6.21's, with `n` events: turns of user, action and
/// bot events, and a confirmation question near the end.
fn body(n: usize) -> String {
    let meta = json!({"model_id": "0810b3c6a21946a3bd4a4bf112e5a73f", "assistant_id": "subscription-change-probe"});
    let mut events: Vec<Value> = Vec::with_capacity(n);
    let mut t = 1_796_027_823.0_f64;
    let mut i = 0;
    while events.len() < n {
        t += 0.5;
        i += 1;
        let id = format!("{i:032x}");
        events.push(json!({"event": "user", "timestamp": t, "metadata": meta, "text": "tell me about my box",
            "parse_data": {"intent": {"name": "chitchat", "confidence": 1.0}, "entities": [], "text": "tell me about my box",
            "message_id": id, "metadata": {}, "text_tokens": [[0, 4], [5, 7], [8, 13]]}, "input_channel": "rest", "message_id": id}));
        events.push(json!({"event": "action", "timestamp": t, "metadata": meta, "name": "utter_chitchat", "policy": "RulePolicy", "confidence": 1.0, "action_text": null, "hide_rule_turn": false}));
        events.push(json!({"event": "bot", "timestamp": t, "metadata": {"utter_action": "utter_chitchat"}, "text": "Your box ships monthly.",
            "data": {"elements": null, "quick_replies": null, "buttons": null, "attachment": null, "image": null, "custom": null}}));
        events.push(json!({"event": "action", "timestamp": t, "metadata": meta, "name": "action_listen", "policy": null, "confidence": null, "action_text": null, "hide_rule_turn": false}));
    }
    events.truncate(n);
    if n >= 4 {
        events[n - 2] = json!({"event": "bot", "timestamp": t, "metadata": {"utter_action": "utter_confirm_subscription_change"},
            "text": "Please confirm WS-SUB-3304 stop_renewal r4, effective 2027-01-01 00:00 UTC.", "data": {}});
    }
    json!({"next_action": "apply_subscription_change", "sender_id": "bench", "version": "3.6.21",
        "tracker": {"sender_id": "bench", "slots": {"change_tag": "WS-SUB-3304 stop_renewal r4"}, "events": events,
        "latest_message": {}, "paused": false, "active_loop": {}}})
    .to_string()
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

    let mut group = c.benchmark_group("confirmation_lookup");
    for (n, request) in &parsed {
        group.throughput(Throughput::Elements(*n as u64));
        let tracker = request.tracker.as_ref().unwrap();
        group.bench_with_input(BenchmarkId::from_parameter(n), tracker, |b, tracker| {
            b.iter(|| {
                let events = tracker.session_events();
                conversation::read(
                    &events,
                    "utter_confirm_subscription_change",
                    "select_subscription_change",
                )
                .unwrap()
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
