//! The subscription service as tests and load drivers see it: its records, read and moved
//! through its HTTP routes (CONTRACT.md section 6), and the demo data's names.

use serde_json::{json, Value};

/// The demo data's Style Box: acct-7's, at r4, offering stop_renewal.
pub const STYLE_BOX: &str = "WS-SUB-3304";

/// Why the Style Box moved, in [`Service::charge_october_box_early`].
pub const STYLE_BOX_WHY: &str =
    "The October Style Box was charged early, on 2026-09-30, while this chat was open.";

/// A subscription service at `url`. Every call panics when the service does not answer as
/// the contract says: these are tests.
#[derive(Clone)]
pub struct Service {
    pub url: String,
    pub http: reqwest::Client,
}

impl Service {
    pub fn new(url: &str) -> Self {
        crate::install_crypto();
        Self {
            url: url.trim_end_matches('/').to_owned(),
            http: reqwest::Client::new(),
        }
    }

    /// The record as the service holds it now.
    pub async fn record(&self, id: &str) -> Value {
        self.http
            .get(format!("{}/v1/subscriptions/{id}", self.url))
            .send()
            .await
            .expect("the service answers")
            .json()
            .await
            .expect("a record is JSON")
    }

    pub async fn revision(&self, id: &str) -> i64 {
        self.record(id).await["revision"]
            .as_i64()
            .expect("a record has a revision")
    }

    /// Moves the facts, through the administration route; the record as stored.
    pub async fn put_record(&self, record: &Value) -> Value {
        let id = record["id"].as_str().expect("a record has an id");
        let response = self
            .http
            .put(format!("{}/v1/subscriptions/{id}", self.url))
            .json(record)
            .send()
            .await
            .expect("the service answers");
        assert!(
            response.status().is_success(),
            "PUT {id}: {}",
            response.status()
        );
        response.json().await.expect("a record is JSON")
    }

    /// The October box charged early: the Style Box moves to r5 with new entitlements and
    /// a note.
    pub async fn charge_october_box_early(&self) -> Value {
        let mut record = self.record(STYLE_BOX).await;
        record.as_object_mut().expect("a record").remove("revision");
        record["options"][0]["entitlements"] =
            json!("October box ships 2026-10-05 (paid); no charge on 2027-01-01; no refund");
        record["notes"]
            .as_array_mut()
            .expect("a record has notes")
            .push(json!({"at": "2026-09-30T08:00:00Z", "text": STYLE_BOX_WHY}));
        self.put_record(&record).await
    }

    /// Creates (or replaces) a record of `account` offering one change, `stop_renewal`:
    /// the record the load drivers change.
    pub async fn put_stop_renewal_record(&self, id: &str, account: &str, product: &str) {
        self.put_record(&json!({"id": id, "account": account, "product": product,
            "plan": "monthly", "status": "active",
            "options": [{"change_type": "stop_renewal",
                         "label": "Stop renewal at the end of the current period",
                         "effective_at": "2027-02-01T00:00:00Z",
                         "entitlements": "January box ships as usual; no charge on 2027-02-01"}],
            "notes": []}))
            .await;
    }
}

/// The record's revision and status at the service are these.
pub async fn assert_record(service: &Service, id: &str, revision: i64, status: &str) {
    let record = service.record(id).await;
    assert_eq!(
        (record["revision"].as_i64(), record["status"].as_str()),
        (Some(revision), Some(status)),
        "{id} at the service"
    );
}
