//! The console's pages, rendered on the server (maud), usable without JavaScript, laid out
//! for a laptop and a phone. Only what a reviewer needs: the question as sent, the reply,
//! the terms, the account, the outcome and who decided; no transcripts, no metadata.

use maud::{html, Markup, PreEscaped, DOCTYPE};

use crate::consent::{Outcome, Terms};
use crate::store::{Approval, AuditEntry, Operation, ReceivedEvent};

const STYLE: &str = r#"
*{box-sizing:border-box}body{margin:0;font:15px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;color:#1d232b;background:#f4f5f7}
header{background:#1f3a5f;color:#fff;padding:.6rem 1rem;display:flex;flex-wrap:wrap;gap:.8rem;align-items:center}
header a{color:#fff;text-decoration:none;font-weight:600}header .who{margin-left:auto;opacity:.85}
header form{display:inline}main{max-width:72rem;margin:0 auto;padding:1rem}
h1{font-size:1.35rem;margin:.4rem 0 1rem}.card{background:#fff;border:1px solid #d8dde3;border-radius:8px;padding:1rem;margin:0 0 1rem}
.meta{color:#5a6572;font-size:.9rem}.terms{background:#f7f9fb;border-left:3px solid #1f3a5f;padding:.5rem .7rem;margin:.6rem 0}
.quote{white-space:pre-wrap;background:#fffbe8;border-left:3px solid #d4a017;padding:.5rem .7rem;margin:.4rem 0}
.actions{display:flex;flex-wrap:wrap;gap:.6rem;align-items:flex-end}.actions form{display:flex;flex-wrap:wrap;gap:.4rem;align-items:flex-end}
input[type=text],input[type=password],select{padding:.45rem;border:1px solid #b9c2cc;border-radius:6px;font:inherit;min-width:10rem}
button{padding:.5rem .9rem;border:0;border-radius:6px;font:inherit;font-weight:600;cursor:pointer;background:#1f3a5f;color:#fff}
button.reject{background:#9b2c2c}button.plain{background:#e3e7ec;color:#1d232b}
table{width:100%;border-collapse:collapse;background:#fff}th,td{text-align:left;padding:.45rem;border-bottom:1px solid #e3e7ec;vertical-align:top}
.badge{display:inline-block;padding:.05rem .45rem;border-radius:999px;background:#e3e7ec;font-size:.85rem}
.applied{background:#d7f0dd}.held{background:#fff0c2}.blocked,.rejected,.expired,.withdrawn{background:#f6d6d6}.unknown,.sent{background:#dfe7f7}
.error{background:#f6d6d6;border:1px solid #d39b9b;padding:.6rem;border-radius:6px}
.filters{display:flex;flex-wrap:wrap;gap:.5rem;align-items:flex-end;margin-bottom:1rem}
@media (max-width:40rem){table,thead,tbody,tr,td{display:block}thead{display:none}td{border:0;padding:.2rem .45rem}tr{border-bottom:1px solid #d8dde3;padding:.4rem 0}}
"#;

/// A page: the header (with sign-out when signed in) and the body.
pub fn layout(title: &str, operator: Option<(&str, &str)>, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · actiongate" }
                style { (PreEscaped(STYLE)) }
            }
            body {
                header {
                    a href="/" { "actiongate" }
                    @if let Some((name, csrf)) = operator {
                        a href="/" { "Held changes" }
                        a href="/pending" { "Pending verification" }
                        a href="/operations" { "Operations" }
                        a href="/mismatches" { "Mismatches" }
                        span.who { "Signed in as " (name) }
                        form method="post" action="/sign-out" {
                            input type="hidden" name="csrf" value=(csrf);
                            button.plain type="submit" { "Sign out" }
                        }
                    }
                }
                main { (body) }
            }
        }
    }
}

pub fn sign_in(csrf: &str, error: Option<&str>) -> Markup {
    layout(
        "Sign in",
        None,
        html! {
            h1 { "Sign in" }
            @if let Some(error) = error { p.error role="alert" { (error) } }
            form.card method="post" action="/sign-in" {
                input type="hidden" name="csrf" value=(csrf);
                p { label { "Name" br; input type="text" name="name" autocomplete="username" required; } }
                p { label { "Password" br; input type="password" name="password" autocomplete="current-password" required; } }
                button type="submit" { "Sign in" }
            }
        },
    )
}

fn waited(ms: i64) -> String {
    let minutes = ms.max(0) / 60_000;
    match minutes {
        0 => "less than a minute".to_owned(),
        1..=59 => format!("{minutes} min"),
        _ => format!("{} h {} min", minutes / 60, minutes % 60),
    }
}

pub fn when(ms: i64) -> String {
    time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000)
        .ok()
        .and_then(|t| {
            t.format(time::macros::format_description!(
                "[year]-[month]-[day] [hour]:[minute]:[second] UTC"
            ))
            .ok()
        })
        .unwrap_or_default()
}

fn terms(t: &Terms) -> Markup {
    html! {
        div.terms {
            strong { (t.label) } br;
            "Effective " (t.effective) br;
            (t.entitlements) br;
            span.meta { (t.tag) }
        }
    }
}

/// The held changes, oldest first, each with approve and reject.
pub fn held(
    operator: (&str, &str),
    items: &[Approval],
    now: i64,
    notice: Option<&str>,
    per_account: usize,
) -> Markup {
    let csrf = operator.1;
    layout(
        "Held changes",
        Some(operator),
        html! {
            h1 { "Held changes" }
            @if let Some(notice) = notice { p.card role="status" { (notice) } }
            p.meta { "At most one change per subscription and " (per_account) " per account wait at once; more are refused to the customer." }
            @if items.is_empty() { p.card { "Nothing is waiting for approval." } }
            @for a in items {
                section.card id=(format!("held-{}", a.request_key)) {
                    div.meta {
                        "Account " strong { (a.account) } " · " (a.subscription) " · " (a.change_type)
                        " · waiting " (waited(now - a.created_at))
                        " · held by rule " (a.rule)
                        " · " a href=(conversation_link(&a.sender_id)) { "conversation" }
                    }
                    p { "The customer was asked:" }
                    div.quote { (a.question) }
                    p { "They replied:" }
                    div.quote { (a.reply) }
                    p { "The service's terms when it was held:" } (terms(&a.terms))
                    div.actions {
                        form method="post" action=(format!("/held/{}/approve", a.request_key)) {
                            input type="hidden" name="csrf" value=(csrf);
                            input type="text" name="note" placeholder="Note (optional)" aria-label="Note for approval";
                            button type="submit" name="approve" { "Approve" }
                        }
                        form method="post" action=(format!("/held/{}/reject", a.request_key)) {
                            input type="hidden" name="csrf" value=(csrf);
                            input type="text" name="note" placeholder="Why (the customer is told)" aria-label="Reason for rejection" required;
                            button.reject type="submit" name="reject" { "Reject" }
                        }
                    }
                }
            }
        },
    )
}

fn badge(state: &str) -> Markup {
    html! { span class=(format!("badge {state}")) { (state) } }
}

/// Operations whose outcome is unknown, with "check now".
pub fn pending(operator: (&str, &str), ops: &[Operation], notice: Option<&str>) -> Markup {
    layout(
        "Pending verification",
        Some(operator),
        html! {
            h1 { "Pending verification" }
            p.meta { "Commands that were sent and not confirmed. Checking asks the subscription service about the same request; it never sends the change again." }
            @if let Some(notice) = notice { p.card role="status" { (notice) } }
            @if ops.is_empty() { p.card { "No outcome is unknown." } }
            @for op in ops {
                section.card {
                    div.meta { "Account " strong { (op.account) } " · " (op.subscription) " · " (op.change_type) " · sent " (when(op.updated_at)) }
                    p { (badge(op.state.as_str())) " " a href=(conversation_link(&op.sender_id)) { "conversation" } }
                    form method="post" action=(format!("/pending/{}/check", op.request_key)) {
                        input type="hidden" name="csrf" value=(operator.1);
                        button type="submit" { "Check now" }
                    }
                }
            }
        },
    )
}

/// The search form's current values.
#[derive(Debug, Default, Clone)]
pub struct Search {
    pub account: String,
    pub conversation: String,
    pub subscription: String,
    pub outcome: String,
    pub since: String,
}

impl Search {
    pub fn query(&self) -> String {
        let enc = |s: &str| {
            percent_encoding::utf8_percent_encode(s, percent_encoding::NON_ALPHANUMERIC).to_string()
        };
        format!(
            "account={}&conversation={}&subscription={}&outcome={}&since={}",
            enc(&self.account),
            enc(&self.conversation),
            enc(&self.subscription),
            enc(&self.outcome),
            enc(&self.since)
        )
    }
}

/// Operations and held changes, searched.
pub fn operations(
    operator: (&str, &str),
    search: &Search,
    ops: &[Operation],
    held: &[Approval],
    error: Option<&str>,
) -> Markup {
    layout(
        "Operations",
        Some(operator),
        html! {
            h1 { "Operations" }
            form.filters method="get" action="/operations" {
                label { "Account" br; input type="text" name="account" value=(search.account); }
                label { "Conversation" br; input type="text" name="conversation" value=(search.conversation); }
                label { "Subscription" br; input type="text" name="subscription" value=(search.subscription); }
                label { "Outcome" br;
                    select name="outcome" {
                        @for o in ["", "applied", "failed", "unknown", "sent", "held", "approved", "rejected", "expired", "blocked", "withdrawn"] {
                            option value=(o) selected[search.outcome == o] { @if o.is_empty() { "any" } @else { (o) } }
                        }
                    }
                }
                label { "Since (YYYY-MM-DD)" br; input type="text" name="since" value=(search.since); }
                button type="submit" { "Search" }
                a href=(format!("/operations.csv?{}", search.query())) { "Export as CSV" }
            }
            @if let Some(error) = error { p.error role="alert" { (error) } }
            table {
                thead { tr { th { "When" } th { "Account" } th { "Subscription" } th { "Change" } th { "Outcome" } th { "Conversation" } } }
                tbody {
                    @for op in ops {
                        tr {
                            td { (when(op.created_at)) } td { (op.account) } td { (op.subscription) } td { (op.change_type) }
                            td { (badge(op.state.as_str())) }
                            td { a href=(conversation_link(&op.sender_id)) { (op.sender_id) } }
                        }
                    }
                    @for a in held {
                        tr {
                            td { (when(a.created_at)) } td { (a.account) } td { (a.subscription) } td { (a.change_type) }
                            td { (badge(a.state.as_str())) @if let Some(by) = &a.decided_by { " by " (by) } }
                            td { a href=(conversation_link(&a.sender_id)) { (a.sender_id) } }
                        }
                    }
                }
            }
            @if ops.is_empty() && held.is_empty() { p.card { "Nothing matches." } }
        },
    )
}

/// Service events that contradicted the operation they named, each with the original
/// request and the confirmed terms.
pub fn mismatches(operator: (&str, &str), items: &[(ReceivedEvent, Option<Operation>)]) -> Markup {
    layout(
        "Mismatches",
        Some(operator),
        html! {
            h1 { "Mismatches" }
            p.meta { "Events from the subscription service that contradict what actiongate sent. Nothing was done on them; a person must look." }
            @if items.is_empty() { p.card { "No event contradicted an operation." } }
            @for (event, op) in items {
                section.card {
                    div.meta { "Received " (when(event.received_at)) " · event " (event.id) " (" (event.kind) ")" }
                    p { strong { (event.detail.as_deref().unwrap_or("")) } }
                    p { "The service says: " (event.subscription) " of " (event.account) " at revision " (event.revision) }
                    @match op {
                        Some(op) => {
                            p { "The request: " (op.change_type) " on " (op.subscription) " at r" (op.revision)
                                " for " (op.account) ", " a href=(conversation_link(&op.sender_id)) { "conversation" }
                                " · now " (badge(op.state.as_str())) }
                            (terms(&op.terms))
                        }
                        None => { p { "No operation of ours has request key " code { (event.request_key.as_deref().unwrap_or("–")) } "." } }
                    }
                }
            }
        },
    )
}

/// One conversation's decisions in order: what was asked, replied, the terms, the outcome,
/// who decided.
pub fn timeline(
    operator: (&str, &str),
    sender: &str,
    entries: &[AuditEntry],
    held: &[(Approval, Outcome)],
) -> Markup {
    layout(
        "Conversation",
        Some(operator),
        html! {
            h1 { "Conversation " code { (sender) } }
            @for (a, outcome) in held {
                section.card {
                    div.meta { "Held " (when(a.created_at)) " · " (a.subscription) " · " (a.change_type) }
                    div.quote { (a.question) }
                    div.quote { (a.reply) }
                    p { "Now: " (badge(outcome.status.as_str()))
                        @if let Some(r) = outcome.reason { " " (r.as_str()) }
                        @if let Some(by) = &a.decided_by { " · decided by " strong { (by) } }
                        @if let Some(note) = &a.note { " · “" (note) "”" } }
                }
            }
            table {
                thead { tr { th { "When" } th { "Step" } th { "Target" } th { "Outcome" } th { "Who decided" } th { "Terms" } } }
                tbody {
                    @for e in entries {
                        tr {
                            td { (when(e.at)) }
                            td { (e.action) }
                            td { (e.target.as_deref().unwrap_or("–")) }
                            td { (badge(&e.status)) @if let Some(r) = &e.reason { " " (r) } }
                            td { (e.operator.as_deref().unwrap_or("the guard")) }
                            td {
                                @if let Some(t) = e.service_terms.as_deref().and_then(|t| serde_json::from_str::<Terms>(t).ok()) { (terms(&t)) }
                            }
                        }
                    }
                }
            }
        },
    )
}

/// The timeline's path for a conversation: the sender id is one path segment,
/// percent-encoded (`x/../../?notice=…` or `victim?x=` stay the id they are).
fn conversation_link(sender_id: &str) -> String {
    format!(
        "/conversations/{}",
        percent_encoding::utf8_percent_encode(
            sender_id,
            crate::subscriptions::client::NOT_UNRESERVED
        )
    )
}
