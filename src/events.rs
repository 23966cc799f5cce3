//! Service events received and weighed (over 400 lines: the listener, its counters and the verdicts are one story, read top to bottom).
//!
//! The subscription service's change events, received: `POST /v1/service-events` on a
//! listener of its own, the signature and its age checked, each event id taken once (across
//! replicas), then what it says weighed against the operation it names: an unknown outcome
//! resolved, an older event noted and nothing else, a contradiction kept for a person.
//! With `provider: stripe`, the same listener takes Stripe's webhooks instead
//! (`POST /v1/stripe-events`, [`stripe`]).

use std::net::TcpListener;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use actix_web::http::StatusCode;
use actix_web::{web, App, HttpRequest, HttpResponse, HttpServer};
use serde_json::{json, Value};

use crate::config::EventSource;
use crate::consent::Guard;
use crate::store::{now_ms, AuditEntry, OpState, Operation, ReceivedEvent, StoreError};
use crate::subscriptions::events::{verify, Event, SignatureError, SIGNATURE_HEADER};

/// The largest event accepted, in bytes (a record is a few kilobytes).
const BODY_LIMIT: usize = 256 * 1024;

/// How long an event taken but not finished (its process stopped) holds its id.
const ABANDONED: Duration = Duration::from_secs(30);

/// What was made of an event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// It resolved an operation whose outcome was unknown.
    Resolved,
    /// It agrees with what the store knew already.
    Confirmed,
    /// A record change, remembered as the subscription's newest known record.
    Recorded,
    /// Older than what the store knows about the subscription: nothing changed.
    Stale,
    /// It contradicts the operation it names: kept for a person, never acted on.
    Mismatch(String),
}

impl Verdict {
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Resolved => "resolved",
            Self::Confirmed => "confirmed",
            Self::Recorded => "recorded",
            Self::Stale => "stale",
            Self::Mismatch(_) => "mismatch",
        }
    }
}

/// What a delivery got.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Received {
    /// A new event, and what was made of it.
    New(Verdict),
    /// An id received before: nothing was done again.
    Duplicate,
    /// Not an event about a subscription: answered, and nothing else.
    Ignored,
}

/// Why a delivery was refused.
#[derive(Debug, thiserror::Error)]
pub enum Refused {
    #[error("{0}")]
    Signature(SignatureError),
    #[error("the event is malformed: {0}")]
    Malformed(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Counts of events, for `/metrics`.
#[derive(Debug, Default)]
pub struct EventCounters {
    received: AtomicU64,
    duplicate: AtomicU64,
    resolved: AtomicU64,
    confirmed: AtomicU64,
    recorded: AtomicU64,
    stale: AtomicU64,
    mismatch: AtomicU64,
    ignored: AtomicU64,
    bad_signature: AtomicU64,
    outside_tolerance: AtomicU64,
    malformed: AtomicU64,
}

impl EventCounters {
    /// The counts in Prometheus' text format.
    pub fn render(&self, out: &mut String) {
        use std::fmt::Write;
        out.push_str(
            "# HELP actiongate_service_events_total Service events by what was made of them.\n",
        );
        out.push_str("# TYPE actiongate_service_events_total counter\n");
        for (label, n) in [
            ("received", &self.received),
            ("duplicate", &self.duplicate),
            ("resolved", &self.resolved),
            ("confirmed", &self.confirmed),
            ("recorded", &self.recorded),
            ("stale", &self.stale),
            ("mismatch", &self.mismatch),
            ("ignored", &self.ignored),
            ("rejected_signature", &self.bad_signature),
            ("rejected_too_old", &self.outside_tolerance),
            ("rejected_malformed", &self.malformed),
        ] {
            let _ = writeln!(
                out,
                "actiongate_service_events_total{{outcome=\"{label}\"}} {}",
                n.load(Ordering::Relaxed)
            );
        }
    }
}

/// Receives events for one store, with the shared secret.
#[derive(Clone)]
pub struct Inbox {
    guard: Guard,
    secret: Arc<[u8]>,
    tolerance: i64,
    counters: Arc<EventCounters>,
    source: EventSource,
}

/// What an event names, as it is taken and, for a mismatch, audited.
struct Named {
    id: String,
    kind: String,
    subscription: String,
    account: String,
    revision: i64,
    request_key: Option<String>,
    /// The change it reports, as the audit shows it.
    change: Value,
}

impl Inbox {
    /// The service's events, signed with the shared secret.
    pub fn new(guard: Guard, secret: &str, tolerance: Duration) -> Self {
        Self::with_source(EventSource::Service, guard, secret, tolerance)
    }

    /// Whose events with which secret: the service's, or Stripe's webhooks signed with
    /// the endpoint's secret (`whsec_…`, used as it is given, as Stripe does).
    pub fn with_source(
        source: EventSource,
        guard: Guard,
        secret: &str,
        tolerance: Duration,
    ) -> Self {
        Self {
            guard,
            secret: secret.as_bytes().into(),
            tolerance: tolerance.as_secs() as i64,
            counters: Arc::default(),
            source,
        }
    }

    pub fn counters(&self) -> Arc<EventCounters> {
        self.counters.clone()
    }

    /// Checks one delivery and acts on it. Nothing is read from the body before its
    /// signature verified; nothing is recorded for a refused one.
    pub async fn receive(&self, signature: Option<&str>, body: &[u8]) -> Result<Received, Refused> {
        self.verified(signature, body)?;
        let event: Event = serde_json::from_slice(body).map_err(|e| {
            self.malformed(format!(
                "not a valid event (line {}, column {})",
                e.line(),
                e.column()
            ))
        })?;
        if event.record.id != event.subscription || event.record.account != event.account {
            return Err(
                self.malformed("the record is not the event's subscription or account".into())
            );
        }
        let named = Named {
            id: event.id.clone(),
            kind: event.kind.clone(),
            subscription: event.subscription.clone(),
            account: event.account.clone(),
            revision: event.revision,
            request_key: event.request_key.clone(),
            change: serde_json::to_value(&event.change).expect("a change serialises"),
        };
        self.settle(named, body, self.weigh(&event)).await
    }

    /// The signature: made with the secret, within the tolerance of now.
    fn verified(&self, signature: Option<&str>, body: &[u8]) -> Result<(), Refused> {
        let c = &self.counters;
        if let Err(e) = verify(
            &self.secret,
            signature,
            body,
            now_ms() / 1000,
            self.tolerance,
        ) {
            let counter = match e {
                SignatureError::OutsideTolerance => &c.outside_tolerance,
                _ => &c.bad_signature,
            };
            counter.fetch_add(1, Ordering::Relaxed);
            return Err(Refused::Signature(e));
        }
        Ok(())
    }

    fn malformed(&self, why: String) -> Refused {
        self.counters.malformed.fetch_add(1, Ordering::Relaxed);
        Refused::Malformed(why)
    }

    /// Takes the event's id once, weighs it, and records and counts the verdict; a
    /// mismatch goes to a person.
    async fn settle(
        &self,
        named: Named,
        body: &[u8],
        weigh: impl std::future::Future<Output = Result<(Verdict, Option<Operation>), StoreError>>,
    ) -> Result<Received, Refused> {
        let c = &self.counters;
        c.received.fetch_add(1, Ordering::Relaxed);
        let store = self.guard.store();
        let taken = store
            .take_event(
                &ReceivedEvent {
                    id: named.id.clone(),
                    received_at: now_ms(),
                    kind: named.kind.clone(),
                    subscription: named.subscription.clone(),
                    account: named.account.clone(),
                    revision: named.revision,
                    request_key: named.request_key.clone(),
                    verdict: "received".to_owned(),
                    detail: None,
                    body: String::from_utf8_lossy(body).into_owned(),
                },
                ABANDONED,
            )
            .await?;
        if !taken {
            c.duplicate.fetch_add(1, Ordering::Relaxed);
            return Ok(Received::Duplicate);
        }
        // Only the delivery that took the id gets here, on any replica. Were it to stop
        // before finishing, the sender's redelivery takes it again after ABANDONED (every
        // effect below is conditional, so doing it twice is doing it once).
        let (verdict, op) = match weigh.await {
            Ok(weighed) => weighed,
            Err(e) => {
                let _ = store.release_event(&named.id).await;
                return Err(e.into());
            }
        };
        let detail = match &verdict {
            Verdict::Mismatch(why) => Some(why.as_str()),
            _ => None,
        };
        store
            .finish_event(&named.id, verdict.as_str(), detail)
            .await?;
        let counter = match &verdict {
            Verdict::Resolved => &c.resolved,
            Verdict::Confirmed => &c.confirmed,
            Verdict::Recorded => &c.recorded,
            Verdict::Stale => &c.stale,
            Verdict::Mismatch(_) => &c.mismatch,
        };
        counter.fetch_add(1, Ordering::Relaxed);
        if let Verdict::Mismatch(why) = &verdict {
            self.escalate(&named, op.as_ref(), why).await?;
        }
        Ok(Received::New(verdict))
    }

    /// An event from `reporter` proving `op`'s change made, `op` read sent or unknown:
    /// resolved as applied; or, when another move got there first, what it recorded:
    /// confirmed when applied, a mismatch for a person when it was failed meanwhile.
    async fn resolve_made(
        &self,
        op: Operation,
        reporter: &str,
    ) -> Result<(Verdict, Option<Operation>), StoreError> {
        if self.guard.resolve_by_event(&op).await? {
            tracing::info!(request_key = %op.request_key, %reporter, "an event resolved the operation: applied");
            return Ok((Verdict::Resolved, Some(op)));
        }
        let now = self.guard.store().operation(&op.request_key).await?;
        Ok(match now {
            Some(now) if now.state == OpState::Failed => (
                Verdict::Mismatch(format!(
                    "{reporter} reports the change made; the operation is failed"
                )),
                Some(now),
            ),
            Some(now) => (Verdict::Confirmed, Some(now)),
            // Given back as never sent meanwhile, yet the change was made under its key.
            None => (
                Verdict::Mismatch(format!(
                    "{reporter} reports the change made; the operation was given back as never sent"
                )),
                Some(op),
            ),
        })
    }

    /// What the event means, and its effects (each conditional, so doing it twice is doing
    /// it once): the known record advanced, an unknown operation resolved.
    async fn weigh(&self, event: &Event) -> Result<(Verdict, Option<Operation>), StoreError> {
        let store = self.guard.store();
        let op = match &event.request_key {
            Some(key) => match store.operation(key).await? {
                Some(op) => Some(op),
                None => {
                    let why = "a change under a request key that no operation of ours has";
                    return Ok((Verdict::Mismatch(why.into()), None));
                }
            },
            None => None,
        };
        if let Some(op) = &op {
            if let Some(why) = contradiction(event, op) {
                return Ok((Verdict::Mismatch(why), Some(op.clone())));
            }
        }
        let record = serde_json::to_string(&event.record).expect("a record serialises");
        let advanced = store
            .advance_known_record(&event.subscription, event.revision, &event.id, &record)
            .await?;
        let Some(op) = op else {
            return Ok((
                if advanced {
                    Verdict::Recorded
                } else {
                    Verdict::Stale
                },
                None,
            ));
        };
        // An event under an operation's key proves the change made whatever came before it:
        // a newer record known already keeps the known record where it is, and still
        // resolves the operation.
        let verdict = match op.state {
            OpState::Sent | OpState::Unknown => return self.resolve_made(op, "the service").await,
            OpState::Applied if advanced => Verdict::Confirmed,
            OpState::Applied => Verdict::Stale,
            // Checked by `contradiction`; kept exhaustive.
            OpState::Claimed | OpState::Failed => Verdict::Mismatch(format!(
                "the service reports the change made; the operation is {}",
                op.state.as_str()
            )),
        };
        Ok((verdict, Some(op)))
    }

    /// A mismatch goes to a person: the audit trail (what `actiongate audit` shows) with the
    /// original request and the confirmed terms, and the log.
    async fn escalate(
        &self,
        event: &Named,
        op: Option<&Operation>,
        why: &str,
    ) -> Result<(), StoreError> {
        tracing::warn!(
            event = %event.id,
            subscription = %event.subscription,
            account = %event.account,
            request_key = event.request_key.as_deref().unwrap_or("-"),
            confirmed_terms = %op.map_or_else(|| "-".to_owned(), |o| o.terms.to_string()),
            %why,
            "an event contradicts the operation it names; a person must look at it"
        );
        self.guard
            .store()
            .audit(AuditEntry {
                at: now_ms(),
                action: match self.source {
                    EventSource::Service => "service_event",
                    EventSource::Stripe => "stripe_event",
                }
                .into(),
                sender_id: op.map_or_else(|| "-".to_owned(), |o| o.sender_id.clone()),
                account: Some(op.map_or_else(|| event.account.clone(), |o| o.account.clone())),
                target: Some(match op {
                    Some(o) => format!("{} {}", o.subscription, o.change_type),
                    None => event.subscription.clone(),
                }),
                question_terms: op.map(|o| o.terms.to_string()),
                service_terms: Some(
                    serde_json::to_string(&json!({
                        "event": event.id,
                        "subscription": event.subscription,
                        "account": event.account,
                        "revision": event.revision,
                        "change": event.change,
                    }))
                    .expect("JSON serialises"),
                ),
                status: "mismatch".into(),
                reason: Some(why.to_owned()),
                request_key: event.request_key.clone(),
                ..AuditEntry::default()
            })
            .await
    }
}

/// What in a change event contradicts the operation under its request key, if anything:
/// another subscription, account or change type, another revision than the one the
/// command named, a change that is not the confirmed one (its date, its status), or an
/// operation that cannot have sent a command.
fn contradiction(event: &Event, op: &Operation) -> Option<String> {
    if event.subscription != op.subscription {
        return Some(format!(
            "the event names subscription {}; the operation changed {}",
            event.subscription, op.subscription
        ));
    }
    if event.account != op.account {
        return Some(format!(
            "the event names account {}; the operation is account {}'s",
            event.account, op.account
        ));
    }
    let Some(change) = &event.change else {
        return Some("a request key without a change".into());
    };
    if change.request_key.as_str() != op.request_key
        || change.subscription != op.subscription
        || change.change_type != op.change_type
    {
        return Some(format!(
            "the event's change is {} on {}; the operation confirmed {}",
            change.change_type, change.subscription, op.change_type
        ));
    }
    if change.revision != event.revision || event.revision != op.revision + 1 {
        return Some(format!(
            "the change made revision {}; the command was for revision {}",
            event.revision, op.revision
        ));
    }
    let terms = &op.terms;
    let effective = crate::subscriptions::model::effective_text(&change.effective_at);
    if change.status != "scheduled" || effective.as_deref() != Some(terms.effective.as_str()) {
        return Some(format!(
            "the change is {} effective {}; the customer confirmed {} effective {}",
            change.status, change.effective_at, op.change_type, terms.effective
        ));
    }
    if matches!(op.state, OpState::Claimed | OpState::Failed) {
        return Some(format!(
            "the service reports the change made; the operation is {}",
            op.state.as_str()
        ));
    }
    None
}

/// Starts the events listener on `listener`; its server runs until stopped.
/// At most `per_peer` connections are open at once from one address.
pub fn serve(
    listener: TcpListener,
    inbox: Inbox,
    per_peer: usize,
) -> std::io::Result<actix_web::dev::Server> {
    let route = match inbox.source {
        EventSource::Service => "/v1/service-events",
        EventSource::Stripe => "/v1/stripe-events",
    };
    let inbox = web::Data::new(inbox);
    let peers = actionserver::PeerLimit::new("service events", per_peer);
    let pace = web::Data::new(actionserver::Pace::new(|| {
        error(
            StatusCode::REQUEST_TIMEOUT,
            "too_slow",
            "the event arrived too slowly; deliver it again",
        )
    }));
    Ok(HttpServer::new(move || {
        App::new()
            .app_data(inbox.clone())
            .app_data(pace.clone())
            .wrap(actix_web::middleware::from_fn(actionserver::paced_bodies))
            .wrap(actix_web::middleware::from_fn(
                actionserver::refuse_over_cap,
            ))
            .app_data(web::PayloadConfig::new(BODY_LIMIT))
            .route(route, web::post().to(receive))
            .default_service(web::to(|| async {
                error(StatusCode::NOT_FOUND, "not_found", "no such route")
            }))
    })
    .workers(1)
    .disable_signals()
    .on_connect(peers.on_connect())
    .listen(listener)?
    .run())
}

fn error(status: StatusCode, code: &str, message: &str) -> HttpResponse {
    HttpResponse::build(status).json(json!({"error": code, "message": message}))
}

async fn receive(req: HttpRequest, inbox: web::Data<Inbox>, body: web::Bytes) -> HttpResponse {
    let header = match inbox.source {
        EventSource::Service => SIGNATURE_HEADER,
        EventSource::Stripe => stripe::SIGNATURE_HEADER,
    };
    let signature = req.headers().get(header).and_then(|v| v.to_str().ok());
    let received = match inbox.source {
        EventSource::Service => inbox.receive(signature, &body).await,
        EventSource::Stripe => inbox.receive_stripe(signature, &body).await,
    };
    match received {
        Ok(Received::New(verdict)) => HttpResponse::Ok().json(json!({"verdict": verdict.as_str()})),
        Ok(Received::Duplicate) => HttpResponse::Ok().json(json!({"verdict": "duplicate"})),
        Ok(Received::Ignored) => HttpResponse::Ok().json(json!({"verdict": "ignored"})),
        Err(Refused::Signature(e)) => error(
            StatusCode::UNAUTHORIZED,
            "invalid_signature",
            &e.to_string(),
        ),
        Err(Refused::Malformed(why)) => error(StatusCode::BAD_REQUEST, "invalid_event", &why),
        Err(Refused::Store(e)) => {
            tracing::error!(error = %e, "a service event could not be recorded");
            // Not 2xx: the service delivers it again.
            error(
                StatusCode::SERVICE_UNAVAILABLE,
                "unavailable",
                "the event could not be recorded; deliver it again",
            )
        }
    }
}

mod stripe;
#[cfg(test)]
mod tests;
