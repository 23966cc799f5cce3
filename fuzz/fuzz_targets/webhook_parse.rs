//! The webhook body as JSON: parsing never panics, every reading helper of a parsed
//! tracker runs, and a tracker serialises back to JSON that parses again with the same
//! events (and serialises to the same bytes a second time).
#![no_main]

use actiongate::protocol::{Tracker, WebhookRequest};
use libfuzzer_sys::fuzz_target;

#[path = "../oracles.rs"]
mod oracles;
use oracles::exercise;

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
