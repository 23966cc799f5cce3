//! Slot validation, as rasa-sdk's `ValidationAction` and `FormValidationAction` do it: the
//! [`SlotValidator`] an application writes (per-slot `extract` and `validate`, and
//! `required_slots`), and the two actions that run one the way Rasa calls them
//! ([`ValidateSlotMappings`], named `action_validate_slot_mappings`, and [`ValidateForm`],
//! named `validate_<form>`).
//!
//! # Why a trait with a `match`, not a builder of closures
//!
//! rasa-sdk finds `validate_<slot>` methods by name at run time. In Rust the same shape is
//! one `async fn validate(&self, slot, value, cx)` that matches on the slot and answers
//! `Ok(None)` for the slots it has no validator for (rasa-sdk's "no method": the value
//! stands). A builder of per-slot async closures reads nicely but cannot be served on a
//! multi-threaded server on stable Rust: nothing can require an async closure's future to
//! be `Send`, and boxing every validator's future with the borrowed tracker in it costs an
//! allocation and a lifetime puzzle per slot. The trait's `async fn`s borrow the tracker and
//! the dispatcher directly, are `Send` whenever their bodies are, and the compiler checks
//! each arm.
//!
//! # What runs, in rasa-sdk's order
//!
//! 1. `required_slots(domain_slots)`; `extract(slot)` for each of them; what the extractors
//!    return is set, and later extractors see it.
//! 2. `required_slots` again; the slots to validate are the trailing run of `slot` events
//!    (the candidates Rasa appended) followed by the extracted ones; a candidate that is not
//!    required is dropped, one with no validator stands, and what each validator returns is
//!    set (later validators see it, and may set other slots too).
//! 3. For a form only, when `required_slots` differs from the domain's list (the
//!    application overrode it), `requested_slot` is set to the first required slot still
//!    empty, or to `null` when none is (which ends the form).
//!
//! The answer is the `slot` events of step 2 (and 3). One difference from rasa-sdk: the
//! global slots (`domain_slots` of [`ValidateSlotMappings`]) come in the order the domain's
//! `slots` object is read here, by name, not in the order Rasa wrote them; it changes only
//! the order of extracted slots' events, never which slots are set or to what.

use std::future::Future;

use serde_json::Value;

use crate::action::{Action, ActionCall, ActionError, ActionResult, Dispatcher};
use crate::protocol::{Message, OutEvent, Tracker};

/// The name Rasa calls the global validation action by.
pub const ACTION_VALIDATE_SLOT_MAPPINGS: &str = "action_validate_slot_mappings";

/// The slot a form keeps the slot it asks for next in.
pub const REQUESTED_SLOT: &str = "requested_slot";

/// Slot values an extractor or validator sets, in order: usually one, the slot itself, with
/// its value accepted (perhaps normalised) or `null` (rejected, so the form asks again).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SlotValues(Vec<(String, Value)>);

impl SlotValues {
    /// No slots (an extractor that found nothing).
    pub fn none() -> Self {
        Self::default()
    }

    /// `slot` set to `value`.
    pub fn accept(slot: impl Into<String>, value: impl Into<Value>) -> Self {
        Self::none().and(slot, value)
    }

    /// `slot` set to `null`: the value is refused, and a form asks for it again.
    pub fn reject(slot: impl Into<String>) -> Self {
        Self::none().and(slot, Value::Null)
    }

    /// One more slot to set; a slot named twice keeps its first place and its last value.
    pub fn and(mut self, slot: impl Into<String>, value: impl Into<Value>) -> Self {
        set(&mut self.0, slot.into(), value.into());
        self
    }

    /// The slots and values, in order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &Value)> {
        self.0.iter().map(|(k, v)| (k.as_str(), v))
    }

    /// Whether no slot is set.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// A Python dict's `d[key] = value` over a list of pairs: an existing key keeps its place.
fn set(pairs: &mut Vec<(String, Value)>, key: String, value: Value) {
    match pairs.iter_mut().find(|(k, _)| *k == key) {
        Some((_, v)) => *v = value,
        None => pairs.push((key, value)),
    }
}

/// What an extractor or validator sees: the tracker with the slots set so far in this call,
/// the domain, and the dispatcher for messages.
pub struct SlotContext<'c> {
    tracker: &'c Tracker<'c>,
    domain: &'c Value,
    version: Option<&'c str>,
    form: Option<&'c str>,
    /// Slots set during this call (rasa-sdk's `tracker.slots.update`), over the tracker's.
    updates: Vec<(String, Value)>,
    dispatcher: &'c mut Dispatcher,
}

impl<'c> SlotContext<'c> {
    /// The slot's value as this call has it: set by an earlier extractor or validator, else
    /// the tracker's; `None` when unset or null (rasa-sdk's `tracker.get_slot`).
    pub fn slot(&self, name: &str) -> Option<&Value> {
        match self.updates.iter().find(|(k, _)| k == name) {
            Some((_, value)) => Some(value).filter(|v| !v.is_null()),
            None => self.tracker.get_slot(name),
        }
    }

    /// The slot as a string, if it is one.
    pub fn slot_str(&self, name: &str) -> Option<&str> {
        self.slot(name)?.as_str()
    }

    /// The slot the form is asking for (`requested_slot`).
    pub fn requested_slot(&self) -> Option<&str> {
        self.slot_str(REQUESTED_SLOT)
    }

    /// The tracker as Rasa sent it (its slots without this call's updates: use
    /// [`Self::slot`] for those).
    pub fn tracker(&self) -> &'c Tracker<'c> {
        self.tracker
    }

    /// The text of the latest customer message.
    pub fn latest_text(&self) -> Option<&'c str> {
        self.tracker.latest_message.get("text")?.as_str()
    }

    /// The domain.
    pub fn domain(&self) -> &'c Value {
        self.domain
    }

    /// Rasa's version, as it reported it.
    pub fn version(&self) -> Option<&'c str> {
        self.version
    }

    /// The form being validated (`None` for `action_validate_slot_mappings`).
    pub fn form(&self) -> Option<&'c str> {
        self.form
    }

    /// Sends a message (say, why a value was refused).
    pub fn utter(&mut self, message: Message) {
        self.dispatcher.utter(message);
    }

    fn update(&mut self, values: &[(String, Value)]) {
        for (k, v) in values {
            set(&mut self.updates, k.clone(), v.clone());
        }
    }
}

/// The application's part of a validation action: which slots, how to extract them, how
/// to validate them. Every method has a default, so implement only what you need.
///
/// ```
/// use actionserver::{ActionError, Message, SlotContext, SlotValidator, SlotValues};
/// use serde_json::Value;
///
/// struct Restaurant;
///
/// impl SlotValidator for Restaurant {
///     async fn validate(
///         &self,
///         slot: &str,
///         value: &Value,
///         cx: &mut SlotContext<'_>,
///     ) -> Result<Option<SlotValues>, ActionError> {
///         Ok(Some(match (slot, value.as_str()) {
///             ("cuisine", Some(c)) if ["thai", "indian"].contains(&c.to_lowercase().as_str()) => {
///                 SlotValues::accept(slot, c.to_lowercase())
///             }
///             ("cuisine", _) => {
///                 cx.utter(Message::response("utter_wrong_cuisine"));
///                 SlotValues::reject(slot)
///             }
///             _ => return Ok(None), // no validator: the value stands
///         }))
///     }
/// }
/// ```
pub trait SlotValidator: Send + Sync + 'static {
    /// The slots to extract and validate: by default the domain's (the form's
    /// `required_slots`, or the global slots). Override it to ask for more or fewer
    /// depending on what is filled; a form then sets `requested_slot` itself.
    fn required_slots(
        &self,
        domain_slots: &[String],
        cx: &mut SlotContext<'_>,
    ) -> impl Future<Output = Result<Vec<String>, ActionError>> + Send {
        let _ = cx;
        let slots = domain_slots.to_vec();
        async move { Ok(slots) }
    }

    /// `extract_<slot>`: values for the slot (or others) read from the conversation, or
    /// `Ok(None)` when this slot has no extractor.
    fn extract(
        &self,
        slot: &str,
        cx: &mut SlotContext<'_>,
    ) -> impl Future<Output = Result<Option<SlotValues>, ActionError>> + Send {
        let _ = (slot, cx);
        async { Ok(None) }
    }

    /// `validate_<slot>`: the values to set for a candidate, or `Ok(None)` when this slot
    /// has no validator (the candidate stands).
    fn validate(
        &self,
        slot: &str,
        value: &Value,
        cx: &mut SlotContext<'_>,
    ) -> impl Future<Output = Result<Option<SlotValues>, ActionError>> + Send {
        let _ = (slot, value, cx);
        async { Ok(None) }
    }
}

/// `action_validate_slot_mappings` (rasa-sdk's `ValidationAction`): validates and extracts
/// the global slots, those no mapping ties to a form. Rasa calls it after every message
/// when the domain lists it among its actions.
pub struct ValidateSlotMappings<V>(pub V);

impl<V: SlotValidator> Action for ValidateSlotMappings<V> {
    fn name(&self) -> &'static str {
        ACTION_VALIDATE_SLOT_MAPPINGS
    }

    fn reads_domain(&self) -> bool {
        true
    }

    async fn run(&self, call: ActionCall<'_>, dispatcher: &mut Dispatcher) -> ActionResult {
        let domain = call.domain.unwrap_or(&Value::Null);
        let domain_slots = global_slots(domain);
        validate(&self.0, &call, dispatcher, None, domain_slots).await
    }
}

/// `validate_<form>` (rasa-sdk's `FormValidationAction`): validates and extracts a form's
/// slots. Rasa's form calls it, when the domain lists it, each time the form runs.
pub struct ValidateForm<V> {
    name: &'static str,
    form: String,
    validator: V,
}

impl<V: SlotValidator> ValidateForm<V> {
    /// The action `name` (`validate_<form>`); the form is the name without its first
    /// `validate_`, as rasa-sdk reads it.
    pub fn new(name: &'static str, validator: V) -> Self {
        Self {
            name,
            form: name.replacen("validate_", "", 1),
            validator,
        }
    }

    /// The form it validates.
    pub fn form(&self) -> &str {
        &self.form
    }
}

impl<V: SlotValidator> Action for ValidateForm<V> {
    fn name(&self) -> &'static str {
        self.name
    }

    fn reads_domain(&self) -> bool {
        true
    }

    async fn run(&self, call: ActionCall<'_>, dispatcher: &mut Dispatcher) -> ActionResult {
        let domain = call.domain.unwrap_or(&Value::Null);
        let domain_slots = form_slots(domain, &self.form);
        validate(
            &self.validator,
            &call,
            dispatcher,
            Some(&self.form),
            domain_slots,
        )
        .await
    }
}

/// The global slots: those without a mapping conditioned on an active loop.
fn global_slots(domain: &Value) -> Vec<String> {
    let Some(slots) = domain.get("slots").and_then(Value::as_object) else {
        return Vec::new();
    };
    slots
        .iter()
        .filter(|(_, slot)| !mapped_to_form(slot))
        .map(|(name, _)| name.clone())
        .collect()
}

fn mapped_to_form(slot: &Value) -> bool {
    let mappings = slot.get("mappings").and_then(Value::as_array);
    mappings.into_iter().flatten().any(|mapping| {
        let conditions = mapping.get("conditions").and_then(Value::as_array);
        conditions
            .into_iter()
            .flatten()
            .any(|c| truthy(c.get("active_loop")))
    })
}

/// Python's truthiness of a JSON value.
fn truthy(value: Option<&Value>) -> bool {
    match value {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(Value::String(s)) => !s.is_empty(),
        Some(Value::Number(n)) => n.as_f64() != Some(0.0),
        Some(Value::Array(a)) => !a.is_empty(),
        Some(Value::Object(o)) => !o.is_empty(),
    }
}

/// The form's `required_slots` in the domain (none when the form is not there).
fn form_slots(domain: &Value, form: &str) -> Vec<String> {
    let required = domain
        .get("forms")
        .and_then(|f| f.get(form))
        .and_then(|f| f.get("required_slots"))
        .and_then(Value::as_array);
    required
        .into_iter()
        .flatten()
        .filter_map(|s| s.as_str().map(str::to_owned))
        .collect()
}

/// Extraction, validation and (for a form) the next requested slot, in rasa-sdk's order.
async fn validate<V: SlotValidator>(
    validator: &V,
    call: &ActionCall<'_>,
    dispatcher: &mut Dispatcher,
    form: Option<&str>,
    domain_slots: Vec<String>,
) -> ActionResult {
    let mut cx = SlotContext {
        tracker: call.tracker,
        domain: call.domain.unwrap_or(&Value::Null),
        version: call.version,
        form,
        updates: Vec::new(),
        dispatcher,
    };
    // 1. Extraction: every required slot's extractor; what they find is set at once.
    let required = validator.required_slots(&domain_slots, &mut cx).await?;
    let mut extracted: Vec<(String, Value)> = Vec::new();
    for slot in &required {
        match validator.extract(slot, &mut cx).await? {
            Some(values) => {
                cx.update(&values.0);
                for (k, v) in values.0 {
                    set(&mut extracted, k, v);
                }
            }
            None if !domain_slots.contains(slot) => {
                tracing::warn!(slot = %slot, "no extractor for a required slot outside the domain's")
            }
            None => {}
        }
    }
    // 2. Validation: the trailing candidates, then the extracted slots.
    let required = validator.required_slots(&domain_slots, &mut cx).await?;
    let mut slots = call.tracker.slots_to_validate();
    for (k, v) in extracted {
        set(&mut slots, k, v);
    }
    let candidates = slots.clone();
    for (slot, value) in candidates {
        if !required.contains(&slot) {
            slots.retain(|(k, _)| *k != slot);
            continue;
        }
        match validator.validate(&slot, &value, &mut cx).await? {
            Some(values) => {
                cx.update(&values.0);
                for (k, v) in values.0 {
                    set(&mut slots, k, v);
                }
            }
            None => tracing::warn!(slot = %slot, "no validator for the slot: its value stands"),
        }
    }
    cx.update(&slots);
    let mut events: Vec<OutEvent> = slots
        .into_iter()
        .map(|(k, v)| OutEvent::slot(k, v))
        .collect();
    // 3. A form whose required slots were overridden asks for the next one itself.
    if form.is_some() {
        let required = validator.required_slots(&domain_slots, &mut cx).await?;
        if required != domain_slots {
            let next = required.into_iter().find(|s| cx.slot(s).is_none());
            events.push(OutEvent::slot(
                REQUESTED_SLOT,
                next.map_or(Value::Null, Value::from),
            ));
        }
    }
    Ok(events)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_form_is_its_action_name_without_the_first_validate() {
        struct Nothing;
        impl SlotValidator for Nothing {}
        assert_eq!(
            ValidateForm::new("validate_booking_form", Nothing).form(),
            "booking_form"
        );
        assert_eq!(
            ValidateForm::new("my_validate_form", Nothing).form(),
            "my_form"
        );
    }

    #[test]
    fn global_slots_are_those_no_mapping_ties_to_a_loop() {
        let domain = json!({"slots": {
            "a": {"type": "text", "mappings": [{"type": "from_text"}]},
            "b": {"type": "text", "mappings": [{"type": "from_text", "conditions": [{"active_loop": "f"}]}]},
            "c": {"type": "text", "mappings": [{"type": "from_text", "conditions": [{"active_loop": null}]}]},
            "d": {"type": "text"},
        }});
        assert_eq!(global_slots(&domain), ["a", "c", "d"]);
        assert!(global_slots(&json!({})).is_empty());
    }

    #[test]
    fn slot_values_keep_first_place_and_last_value() {
        let values = SlotValues::accept("a", 1).and("b", 2).and("a", 3);
        let pairs: Vec<_> = values.iter().collect();
        assert_eq!(pairs, [("a", &json!(3)), ("b", &json!(2))]);
        assert_eq!(
            SlotValues::reject("x").iter().next(),
            Some(("x", &Value::Null))
        );
    }
}
