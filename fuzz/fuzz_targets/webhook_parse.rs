//! The webhook body as JSON: parsing never panics, every reading helper of a parsed
//! tracker runs, and a tracker serialises back to JSON that parses again with the same
//! events (and serialises to the same bytes a second time).
#![no_main]

use actiongate::protocol::{Tracker, WebhookRequest};
use libfuzzer_sys::fuzz_target;

fn exercise(tracker: &Tracker) {
    let applied = tracker.applied_events();
    let session = tracker.session_events();
    assert!(applied.len() <= tracker.events.len());
    // The session's events are the applied events less those before its start.
    assert!(session.len() <= applied.len());
    let tail = &applied[applied.len() - session.len()..];
    assert!(
        tail.iter().zip(&session).all(|(a, b)| std::ptr::eq(*a, *b)),
        "the session's events are not a suffix of the applied events"
    );
    let _ = tracker.slots_to_validate();
    let _ = tracker.latest_intent();
    let _ = tracker.latest_input_channel();
    let _ = tracker.events_after_latest_restart();
    let _ = tracker.active_loop_name();
    for event in &tracker.events {
        let _ = event.typed();
    }
}

fuzz_target!(|data: &[u8]| {
    let Ok(request) = serde_json::from_slice::<WebhookRequest>(data) else {
        return;
    };
    let Some(tracker) = request.tracker.as_ref() else {
        return;
    };
    exercise(tracker);
    let once = serde_json::to_vec(tracker).expect("a parsed tracker serialises");
    let again: Tracker = match serde_json::from_slice(&once) {
        Ok(t) => t,
        Err(e) => panic!(
            "a re-serialised tracker does not parse: {e}\n{}",
            String::from_utf8_lossy(&once)
        ),
    };
    assert_eq!(again.events.len(), tracker.events.len());
    assert_eq!(again.sender_id, tracker.sender_id);
    let twice = serde_json::to_vec(&again).expect("a parsed tracker serialises");
    assert_eq!(once, twice, "serialising is not stable");
});
