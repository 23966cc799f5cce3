//! The inbox's verdict on an event proving a change made, weighed against what the store
//! holds by the time it resolves: another move may have ended the operation first.

use super::*;
use crate::consent::outcome::{Outcome, Reason, Terms};
use crate::consent::ConsentConfig;
use crate::store::{Claim, Store};
use crate::subscriptions::ServiceClient;

/// An operation of `subscription`, claimed and sent, as the inbox reads it.
async fn sent(store: &Store, subscription: &str) -> Operation {
    let op = Operation {
        request_key: format!("k-{subscription}"),
        sender_id: "s".into(),
        account: "acct-7".into(),
        subscription: subscription.into(),
        change_type: "stop_renewal".into(),
        revision: 4,
        terms: Terms {
            tag: format!("{subscription} stop_renewal r4"),
            label: "Stop renewal".into(),
            effective: "2027-01-01 00:00 UTC".into(),
            entitlements: "as read out".into(),
        },
        state: OpState::Claimed,
        outcome: None,
        created_at: now_ms(),
        updated_at: now_ms(),
        asked_at: Some(now_ms()),
    };
    assert_eq!(store.claim(&op).await.unwrap(), Claim::Claimed);
    assert!(store.mark_sent(&op.request_key).await.unwrap());
    store.operation(&op.request_key).await.unwrap().unwrap()
}

#[tokio::test]
async fn an_event_for_an_operation_ended_meanwhile_answers_what_ended_it() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite:{}", dir.path().join("events.db").display());
    let store = Store::connect(&url).await.unwrap();
    let nowhere = ServiceClient::new("http://127.0.0.1:9", Duration::from_secs(1), None).unwrap();
    let guard = Guard::new(ConsentConfig::default(), nowhere, store.clone());
    let inbox = Inbox::new(guard, "secret", Duration::from_secs(300));

    // Read as sent; failed by its command's answer before the event resolves it: the
    // event contradicts the outcome recorded, which stands, and a person is told.
    let seen = sent(&store, "WS-SUB-1").await;
    let failed = Outcome::blocked(Reason::StaleAtService);
    assert!(store
        .set_state(&seen.request_key, OpState::Failed, Some(&failed))
        .await
        .unwrap());
    let (verdict, op) = inbox
        .resolve_made(seen.clone(), "the service")
        .await
        .unwrap();
    assert!(
        matches!(&verdict, Verdict::Mismatch(why) if why.contains("failed")),
        "{verdict:?}"
    );
    assert_eq!(op.map(|op| op.state), Some(OpState::Failed));
    let kept = store.operation(&seen.request_key).await.unwrap().unwrap();
    assert_eq!(kept.state, OpState::Failed, "never made applied");

    // Applied meanwhile (the command's own answer): the event agrees.
    let seen = sent(&store, "WS-SUB-2").await;
    assert!(store
        .set_state(&seen.request_key, OpState::Applied, None)
        .await
        .unwrap());
    let (verdict, _) = inbox
        .resolve_made(seen.clone(), "the service")
        .await
        .unwrap();
    assert!(matches!(verdict, Verdict::Confirmed), "{verdict:?}");

    // Still sent: the event resolves it.
    let seen = sent(&store, "WS-SUB-3").await;
    let (verdict, _) = inbox
        .resolve_made(seen.clone(), "the service")
        .await
        .unwrap();
    assert!(matches!(verdict, Verdict::Resolved), "{verdict:?}");
    let made = store.operation(&seen.request_key).await.unwrap().unwrap();
    assert_eq!(made.state, OpState::Applied);

    // Given back as never sent meanwhile (its row gone), yet made under its key: a person
    // is told, and nothing is recorded for a key no operation holds.
    let seen = sent(&store, "WS-SUB-4").await;
    assert!(store.release(&seen.request_key).await.unwrap());
    let (verdict, _) = inbox
        .resolve_made(seen.clone(), "the service")
        .await
        .unwrap();
    assert!(
        matches!(&verdict, Verdict::Mismatch(why) if why.contains("never sent")),
        "{verdict:?}"
    );
    assert!(store.operation(&seen.request_key).await.unwrap().is_none());
}
