//! `list_subscriptions`: the authenticated account's subscriptions, each with the change
//! types the service offers. Filtered by the service, before anything reaches the model.

use serde_json::{json, Value};

use super::{outcome_events, Action, ActionCall, ActionError, ActionResult, Dispatcher};
use crate::consent::identity::account;
use crate::consent::Guard;
use crate::consent::{Outcome, Reason};
use actionserver::{Message, OutEvent};

pub struct ListSubscriptions(pub Guard);

impl Action for ListSubscriptions {
    fn name(&self) -> &'static str {
        "list_subscriptions"
    }

    async fn run(&self, call: ActionCall<'_>, dispatcher: &mut Dispatcher) -> ActionResult {
        let guard = &self.0;
        let tracker = call.tracker;
        let account = account(tracker, &guard.config().identity)
            .map_err(|e| ActionError::rejected(e.to_string()))?;
        let Some(account) = account else {
            return Ok(outcome_events(&Outcome::not_authenticated(), dispatcher));
        };
        let subscriptions = match guard.provider().list(&account).await {
            Ok(list) => list,
            Err(e) => {
                tracing::warn!(error = %e, "the subscriptions could not be listed");
                let outcome = Outcome::blocked(Reason::ServiceUnavailable);
                return Ok(outcome_events(&outcome, dispatcher));
            }
        };
        let list: Vec<Value> = subscriptions
            .iter()
            .filter(|s| s.account == account)
            .map(|s| {
                json!({
                    "id": s.id,
                    "product": s.product,
                    "plan": s.plan,
                    "status": s.status,
                    "change_types": s.options.iter().map(|o| o.change_type.as_str()).collect::<Vec<_>>(),
                })
            })
            .collect();
        let summary = subscriptions
            .iter()
            .filter(|s| s.account == account)
            .map(|s| {
                let types: Vec<&str> = s.options.iter().map(|o| o.change_type.as_str()).collect();
                format!(
                    "{} ({} changes possible: {})",
                    s.display_name(),
                    s.status,
                    types.join(", ")
                )
            })
            .collect::<Vec<_>>()
            .join("; ");
        dispatcher.utter(
            Message::response("utter_list_subscriptions")
                .with_custom(json!({"subscriptions": list}))
                .with_var(
                    "summary",
                    if summary.is_empty() {
                        "none".to_owned()
                    } else {
                        summary
                    },
                ),
        );
        Ok(vec![OutEvent::slot("subscriptions", Value::Array(list))])
    }
}
