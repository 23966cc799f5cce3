//! What a write does to Stripe's record: the facts it must leave, whether an answer or an
//! event shows that and nothing else, and the records a write could have been made from.

use super::{Facts, Write, CANCEL_NOW, RESUME_RENEWAL, STOP_RENEWAL};

/// The statuses a live subscription can have before it is cancelled at once.
const LIVE: [&str; 3] = ["active", "trialing", "past_due"];

impl Write {
    /// What a change type sends, whatever the record now says (a resend, an event).
    pub fn of(change_type: &str) -> Option<Write> {
        match change_type {
            STOP_RENEWAL => Some(Write::CancelAtPeriodEnd(true)),
            RESUME_RENEWAL => Some(Write::CancelAtPeriodEnd(false)),
            CANCEL_NOW => Some(Write::CancelNow),
            _ => None,
        }
    }

    /// Whether `facts` show the write made.
    pub fn shown_in(self, facts: &Facts) -> bool {
        match self {
            Write::CancelAtPeriodEnd(on) => facts.cancel_at_period_end == on,
            Write::CancelNow => facts.status == "canceled",
        }
    }
}

impl Facts {
    /// The facts as they must read once `write` is made on these, and nothing else has
    /// moved. Stripe sets `cancel_at` to the period's end beside `cancel_at_period_end`
    /// (localstripe leaves it empty) and clears it on resuming; `seen` is the `cancel_at`
    /// the answer shows, taken when it is one of those.
    pub fn after(&self, write: Write, seen: Option<i64>) -> Facts {
        let mut next = self.clone();
        match write {
            Write::CancelAtPeriodEnd(on) => {
                next.cancel_at_period_end = on;
                next.cancel_at = seen.filter(|&t| on && t == self.period_end);
            }
            Write::CancelNow => next.status = "canceled".into(),
        }
        next
    }

    /// Whether these facts are exactly `before` with `write` made: nothing else moved.
    pub fn made_from(&self, before: &Facts, write: Write) -> bool {
        self.fingerprint() == before.after(write, self.cancel_at).fingerprint()
    }

    /// The records `write` could have been made on to give these facts, for when the
    /// record before it is known only by its fingerprint (a resend, an event without
    /// the earlier attributes).
    pub fn undone(&self, write: Write) -> Vec<Facts> {
        let mut candidates = Vec::new();
        match write {
            Write::CancelAtPeriodEnd(on) => {
                for cancel_at in [None, Some(self.period_end)] {
                    let mut before = self.clone();
                    before.cancel_at_period_end = !on;
                    before.cancel_at = cancel_at;
                    candidates.push(before);
                }
            }
            Write::CancelNow => {
                for status in LIVE {
                    let mut before = self.clone();
                    before.status = status.into();
                    candidates.push(before);
                }
            }
        }
        candidates.retain(|before| self.made_from(before, write));
        candidates
    }

    /// Whether these facts are `revision`'s record with `write` made, and nothing else.
    pub fn made_from_revision(&self, revision: i64, write: Write) -> bool {
        self.undone(write)
            .iter()
            .any(|before| before.fingerprint() == revision)
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::facts;
    use super::*;
    use serde_json::json;

    #[test]
    fn a_write_is_read_back_with_or_without_stripes_cancel_at() {
        let before = facts(json!({}));
        let write = Write::CancelAtPeriodEnd(true);
        let bare = before.after(write, None);
        assert!(bare.made_from(&before, write), "localstripe: no cancel_at");
        let mut stripe = bare.clone();
        stripe.cancel_at = Some(before.period_end);
        assert!(
            stripe.made_from(&before, write),
            "Stripe: cancel_at at the period's end"
        );
        let mut elsewhen = bare.clone();
        elsewhen.cancel_at = Some(before.period_end + 86_400);
        assert!(
            !elsewhen.made_from(&before, write),
            "another end is another writer's"
        );
        let mut repriced = bare.clone();
        repriced.lines[0].amount += 100;
        assert!(!repriced.made_from(&before, write));
        assert!(!before.made_from(&before, write), "the write is not shown");
    }

    #[test]
    fn the_record_before_a_write_is_found_by_its_fingerprint() {
        let before = facts(json!({}));
        let write = Write::CancelAtPeriodEnd(true);
        let mut made = before.after(write, None);
        made.cancel_at = Some(before.period_end);
        assert!(made.made_from_revision(before.fingerprint(), write));
        assert!(!made.made_from_revision(before.fingerprint() ^ 1, write));
        assert!(!before.made_from_revision(before.fingerprint(), write));
        let resumed = made.after(Write::CancelAtPeriodEnd(false), None);
        assert!(resumed.made_from_revision(made.fingerprint(), Write::CancelAtPeriodEnd(false)));
        let mut live = before.clone();
        live.status = "trialing".into();
        let cancelled = live.after(Write::CancelNow, None);
        assert!(cancelled.made_from_revision(live.fingerprint(), Write::CancelNow));
        assert_eq!(Write::of("pause"), None);
    }
}
