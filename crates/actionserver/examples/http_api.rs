//! An action that calls an HTTP API: `action_order_status` reads the order from a slot,
//! asks the shop's API (one `reqwest::Client`, shared through the registry) and tells the
//! customer, within a time budget Rasa's own timeout leaves room for. Run:
//! `SHOP_API=http://127.0.0.1:8080 cargo run -p actionserver --example http_api -- 5055`.

use std::time::Duration;

use actionserver::{
    Action, ActionCall, ActionError, ActionResult, Dispatcher, Message, OutEvent, Registry,
    ServerSettings,
};
use serde_json::Value;

/// Where the shop's API is, and the client that calls it (shared by every call).
pub struct Shop {
    /// The API's base URL.
    pub base: String,
    /// One client: its connections are kept between calls.
    pub http: reqwest::Client,
}

/// Tells the customer where their order is.
pub struct OrderStatus;

impl Action for OrderStatus {
    fn name(&self) -> &'static str {
        "action_order_status"
    }

    fn time_budget(&self) -> Option<Duration> {
        Some(Duration::from_secs(3))
    }

    fn timed_out(&self, dispatcher: &mut Dispatcher) -> ActionResult {
        dispatcher.utter(Message::text(
            "The shop is slow to answer; please ask me again in a minute.",
        ));
        Ok(vec![])
    }

    async fn run(&self, call: ActionCall<'_>, dispatcher: &mut Dispatcher) -> ActionResult {
        let shop = call
            .state::<Shop>()
            .ok_or_else(|| ActionError::rejected("no shop configured"))?;
        let Some(order) = call.tracker.slots.get_str("order_id") else {
            dispatcher.utter(Message::response("utter_ask_order_id"));
            return Ok(vec![]);
        };
        // The id goes in the path as one escaped segment, whatever the customer typed.
        let mut url = reqwest::Url::parse(&shop.base).map_err(ActionError::failed)?;
        url.path_segments_mut()
            .map_err(|()| ActionError::rejected("the shop's URL cannot take a path"))?
            .pop_if_empty()
            .extend(["orders", order]);
        let response = shop
            .http
            .get(url)
            .send()
            .await
            .map_err(ActionError::failed)?;
        if response.status() == reqwest::StatusCode::NOT_FOUND {
            dispatcher.utter(Message::text(format!("I can't find order {order}.")));
            return Ok(vec![OutEvent::slot("order_id", Value::Null)]);
        }
        let order_state: Value = response
            .error_for_status()
            .map_err(ActionError::failed)?
            .json()
            .await
            .map_err(ActionError::failed)?;
        let status = order_state["status"].as_str().unwrap_or("unknown");
        dispatcher.utter(Message::text(format!("Order {order} is {status}.")));
        Ok(vec![OutEvent::slot("order_status", status)])
    }
}

#[allow(dead_code)]
#[actix_web::main]
async fn main() -> std::io::Result<()> {
    // reqwest is built without a TLS provider of its own in this workspace; choose ring.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let port: u16 = std::env::args()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(5055);
    let base = std::env::var("SHOP_API").unwrap_or_else(|_| "http://127.0.0.1:8080".to_owned());
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(2))
        .build()
        .map_err(std::io::Error::other)?;
    let mut registry = Registry::default();
    registry
        .register(OrderStatus)
        .expect("one action, one name")
        .share(Shop { base, http });
    let listener = std::net::TcpListener::bind(("127.0.0.1", port))?;
    actionserver::serve(listener, registry, ServerSettings::default(), None)?.await
}
