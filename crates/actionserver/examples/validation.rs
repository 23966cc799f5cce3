//! Validation actions: `action_validate_slot_mappings` for the global slots and two forms'
//! `validate_<form>` (one overriding `required_slots`). The same actions as
//! `tests/validation/actions.py` for rasa-sdk; `scripts/validation-conformance.sh` sends
//! both the same requests. Run: `cargo run -p actionserver --example validation -- 5055`.

use actionserver::{
    ActionError, Message, Registry, ServerSettings, SlotContext, SlotValidator, SlotValues,
    ValidateForm, ValidateSlotMappings,
};
use serde_json::Value;

type Validated = Result<Option<SlotValues>, ActionError>;

/// The global slots: a phone number and an email address.
pub struct Contact;

impl SlotValidator for Contact {
    async fn extract(&self, slot: &str, cx: &mut SlotContext<'_>) -> Validated {
        if slot != "email" {
            return Ok(None);
        }
        let text = cx.latest_text().unwrap_or_default();
        Ok(Some(
            match text.split_whitespace().find(|t| t.contains('@')) {
                Some(address) => SlotValues::accept("email", address),
                None => SlotValues::none(),
            },
        ))
    }

    async fn validate(&self, slot: &str, value: &Value, cx: &mut SlotContext<'_>) -> Validated {
        Ok(Some(match slot {
            "phone" => {
                let digits: String = python_str(value)
                    .chars()
                    .filter(char::is_ascii_digit)
                    .collect();
                if digits.len() >= 7 {
                    SlotValues::accept(slot, digits)
                } else {
                    cx.utter(Message::text("That phone number looks too short."));
                    SlotValues::reject(slot)
                }
            }
            "email" => match value.as_str() {
                Some(address) if address.contains('@') => {
                    SlotValues::accept(slot, address.to_lowercase())
                }
                _ => SlotValues::reject(slot),
            },
            _ => return Ok(None),
        }))
    }
}

/// `str(value)` for the values a slot holds.
fn python_str(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn cuisine(value: &Value, cx: &mut SlotContext<'_>) -> SlotValues {
    match value.as_str().map(str::to_lowercase) {
        Some(c) if ["thai", "indian", "italian"].contains(&c.as_str()) => {
            SlotValues::accept("cuisine", c)
        }
        _ => {
            cx.utter(Message::response("utter_wrong_cuisine"));
            SlotValues::reject("cuisine")
        }
    }
}

/// `restaurant_form`: cuisine, number of people, and seating read from the words.
pub struct Restaurant;

impl SlotValidator for Restaurant {
    async fn extract(&self, slot: &str, cx: &mut SlotContext<'_>) -> Validated {
        if slot != "outdoor_seating" {
            return Ok(None);
        }
        if cx.requested_slot() != Some("outdoor_seating") {
            return Ok(Some(SlotValues::none()));
        }
        let text = cx.latest_text().unwrap_or_default().to_lowercase();
        Ok(Some(if text.contains("outside") {
            SlotValues::accept(slot, true)
        } else if text.contains("inside") {
            SlotValues::accept(slot, false)
        } else {
            SlotValues::none()
        }))
    }

    async fn validate(&self, slot: &str, value: &Value, cx: &mut SlotContext<'_>) -> Validated {
        Ok(Some(match slot {
            "cuisine" => cuisine(value, cx),
            "num_people" => {
                let n = match value {
                    Value::Number(n) => n.as_i64(),
                    Value::String(s) if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) => {
                        s.parse().ok()
                    }
                    _ => None,
                };
                match n {
                    Some(n) if n > 0 => SlotValues::accept(slot, n),
                    _ => {
                        cx.utter(Message::text("How many people, as a number?"));
                        SlotValues::reject(slot)
                    }
                }
            }
            _ => return Ok(None),
        }))
    }
}

/// `booking_form`: asks whether vegetarian is fine when the cuisine is Indian.
pub struct Booking;

impl SlotValidator for Booking {
    async fn required_slots(
        &self,
        domain_slots: &[String],
        cx: &mut SlotContext<'_>,
    ) -> Result<Vec<String>, ActionError> {
        let mut slots = domain_slots.to_vec();
        if cx.slot_str("cuisine") == Some("indian") {
            slots.push("vegetarian".to_owned());
        }
        Ok(slots)
    }

    async fn validate(&self, slot: &str, value: &Value, cx: &mut SlotContext<'_>) -> Validated {
        Ok(Some(match slot {
            "cuisine" => cuisine(value, cx),
            "vegetarian" => match value {
                Value::Bool(b) => SlotValues::accept(slot, *b),
                Value::String(s) if s.eq_ignore_ascii_case("yes") => SlotValues::accept(slot, true),
                Value::String(s) if s.eq_ignore_ascii_case("no") => SlotValues::accept(slot, false),
                _ => SlotValues::reject(slot),
            },
            _ => return Ok(None),
        }))
    }
}

/// The three actions.
pub fn registry() -> Registry {
    let mut registry = Registry::default();
    registry
        .register(ValidateSlotMappings(Contact))
        .and_then(|r| r.register(ValidateForm::new("validate_restaurant_form", Restaurant)))
        .and_then(|r| r.register(ValidateForm::new("validate_booking_form", Booking)))
        .expect("three actions, three names");
    registry
}

#[allow(dead_code)]
#[actix_web::main]
async fn main() -> std::io::Result<()> {
    let port: u16 = std::env::args()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(5055);
    let listener = std::net::TcpListener::bind(("127.0.0.1", port))?;
    let settings = ServerSettings {
        workers: 1,
        ..ServerSettings::default()
    };
    actionserver::serve(listener, registry(), settings, None)?.await
}
