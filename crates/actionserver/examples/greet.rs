//! A complete custom action server with one action, as the crate's README shows it:
//! `cargo run -p actionserver --example greet`, then point Rasa's `action_endpoint` at
//! `http://localhost:5055/webhook`. tests/api/example.rs serves the same action and calls it.

use actionserver::{Action, ActionCall, ActionResult, Dispatcher, Message, OutEvent, Registry};

/// Greets the customer by the `name` slot, and remembers that it did.
pub struct Greet;

impl Action for Greet {
    fn name(&self) -> &'static str {
        "action_greet"
    }

    async fn run(&self, call: ActionCall<'_>, dispatcher: &mut Dispatcher) -> ActionResult {
        let name = call.tracker.get_slot("name").and_then(|v| v.as_str());
        dispatcher.utter(Message::text(format!(
            "Hello, {}!",
            name.unwrap_or("there")
        )));
        Ok(vec![OutEvent::slot("greeted", true)])
    }
}

#[allow(dead_code)] // the test uses the action, not main
#[actix_web::main]
async fn main() -> std::io::Result<()> {
    let mut registry = Registry::default();
    registry.register(Greet).expect("one action, one name");
    let listener = std::net::TcpListener::bind("0.0.0.0:5055")?;
    actionserver::serve(listener, registry, Default::default(), None)?.await
}
