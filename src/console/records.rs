//! What happened, for reading: the operations (searched, and as CSV), the service events
//! that contradicted an operation, and a conversation's timeline.

use super::*;

pub(super) fn search_from(q: &HashMap<String, String>) -> pages::Search {
    let get = |k: &str| q.get(k).map(|v| v.trim().to_owned()).unwrap_or_default();
    pages::Search {
        account: get("account"),
        conversation: get("conversation"),
        subscription: get("subscription"),
        outcome: get("outcome"),
        since: get("since"),
    }
}

type Found = (Vec<crate::store::Operation>, Vec<crate::store::Approval>);

pub(super) async fn find(
    console: &Console,
    s: &pages::Search,
) -> Result<Result<Found, String>, crate::store::StoreError> {
    let since = if s.since.is_empty() {
        None
    } else {
        match time::Date::parse(
            &s.since,
            time::macros::format_description!("[year]-[month]-[day]"),
        ) {
            Ok(d) => Some((d.midnight().assume_utc().unix_timestamp_nanos() / 1_000_000) as i64),
            Err(_) => return Ok(Err(format!("“{}” is not a date like 2026-12-01.", s.since))),
        }
    };
    let some = |v: &str| (!v.is_empty()).then(|| v.to_owned());
    // An outcome of a held change names no operation state: then only holds match.
    let approval_state = [
        "held",
        "approved",
        "rejected",
        "expired",
        "blocked",
        "withdrawn",
    ]
    .contains(&s.outcome.as_str());
    let ops = if approval_state {
        Vec::new()
    } else {
        console
            .guard
            .store()
            .search_operations(&OperationFilter {
                account: some(&s.account),
                sender_id: some(&s.conversation),
                subscription: some(&s.subscription),
                state: some(&s.outcome),
                since,
                limit: 500,
            })
            .await?
    };
    let held = console
        .guard
        .store()
        .approvals(None)
        .await?
        .into_iter()
        .filter(|a| s.account.is_empty() || a.account == s.account)
        .filter(|a| s.conversation.is_empty() || a.sender_id == s.conversation)
        .filter(|a| s.subscription.is_empty() || a.subscription == s.subscription)
        .filter(|a| s.outcome.is_empty() || a.state.as_str() == s.outcome)
        .filter(|a| since.is_none_or(|t| a.created_at >= t))
        // An approved hold is shown by its operation.
        .filter(|a| a.state != ApprovalState::Approved || s.outcome == "approved")
        .collect();
    Ok(Ok((ops, held)))
}

pub(super) async fn operations_page(
    req: HttpRequest,
    console: web::Data<Console>,
    q: web::Query<HashMap<String, String>>,
) -> HttpResponse {
    let (_, session) = match operator(&req, &console, true).await {
        Ok(s) => s,
        Err(refused) => return refused,
    };
    let search = search_from(&q);
    match find(&console, &search).await {
        Ok(Ok((ops, held))) => html(pages::operations(
            (&session.operator, &session.csrf),
            &search,
            &ops,
            &held,
            None,
        )),
        Ok(Err(why)) => html(pages::operations(
            (&session.operator, &session.csrf),
            &search,
            &[],
            &[],
            Some(&why),
        )),
        Err(e) => internal(e),
    }
}

/// A CSV field, never read as a formula by a spreadsheet: prefixed with `'` when it
/// begins as a formula does. (The writer quotes every field, so no separator inside one,
/// `,` or `;`, starts a new cell.)
pub(super) fn inert(field: String) -> String {
    if field.starts_with(['=', '+', '-', '@', '\t', '\r']) {
        format!("'{field}")
    } else {
        field
    }
}

pub(super) async fn operations_csv(
    req: HttpRequest,
    console: web::Data<Console>,
    q: web::Query<HashMap<String, String>>,
) -> HttpResponse {
    if let Err(refused) = operator(&req, &console, false).await {
        return refused;
    }
    let search = search_from(&q);
    let (ops, held) = match find(&console, &search).await {
        Ok(Ok(found)) => found,
        Ok(Err(why)) => return HttpResponse::BadRequest().body(why),
        Err(e) => return internal(e),
    };
    let mut out = String::from(
        "created,account,subscription,change_type,outcome,decided_by,conversation,request_key\n",
    )
    .into_bytes();
    let mut rows = csv::WriterBuilder::new()
        .quote_style(csv::QuoteStyle::Always)
        .from_writer(&mut out);
    let ops = ops.iter().map(|op| {
        [
            pages::when(op.created_at),
            op.account.clone(),
            op.subscription.clone(),
            op.change_type.clone(),
            op.state.as_str().to_owned(),
            String::new(),
            op.sender_id.clone(),
            op.request_key.clone(),
        ]
    });
    let held = held.iter().map(|a| {
        [
            pages::when(a.created_at),
            a.account.clone(),
            a.subscription.clone(),
            a.change_type.clone(),
            a.state.as_str().to_owned(),
            a.decided_by.clone().unwrap_or_default(),
            a.sender_id.clone(),
            a.request_key.clone(),
        ]
    });
    for row in ops.chain(held) {
        if let Err(e) = rows.write_record(row.map(inert)) {
            return internal(e);
        }
    }
    if let Err(e) = rows.flush() {
        return internal(e);
    }
    drop(rows);
    HttpResponse::Ok()
        .content_type("text/csv; charset=utf-8")
        .insert_header((
            header::CONTENT_DISPOSITION,
            "attachment; filename=\"operations.csv\"",
        ))
        .body(out)
}

pub(super) async fn mismatches_page(req: HttpRequest, console: web::Data<Console>) -> HttpResponse {
    let (_, session) = match operator(&req, &console, true).await {
        Ok(s) => s,
        Err(refused) => return refused,
    };
    let store = console.guard.store();
    let events = match store.received_events(Some("mismatch")).await {
        Ok(events) => events,
        Err(e) => return internal(e),
    };
    let mut items = Vec::new();
    for event in events {
        let op = match &event.request_key {
            Some(key) => match store.operation(key).await {
                Ok(op) => op,
                Err(e) => return internal(e),
            },
            None => None,
        };
        items.push((event, op));
    }
    html(pages::mismatches(
        (&session.operator, &session.csrf),
        &items,
    ))
}

pub(super) async fn timeline_page(
    req: HttpRequest,
    console: web::Data<Console>,
    sender: web::Path<String>,
) -> HttpResponse {
    let (_, session) = match operator(&req, &console, true).await {
        Ok(s) => s,
        Err(refused) => return refused,
    };
    let store = console.guard.store();
    let entries = match store.audit_entries(Some(&sender), None).await {
        Ok(e) => e,
        Err(e) => return internal(e),
    };
    let held = match store.approvals(None).await {
        Ok(all) => all
            .into_iter()
            .filter(|a| a.sender_id == *sender)
            .collect::<Vec<_>>(),
        Err(e) => return internal(e),
    };
    let mut with_outcomes = Vec::new();
    for a in held {
        match console.guard.approval_outcome(&a).await {
            Ok(outcome) => with_outcomes.push((a, outcome)),
            Err(e) => return internal(e),
        }
    }
    html(pages::timeline(
        (&session.operator, &session.csrf),
        &sender,
        &entries,
        &with_outcomes,
    ))
}
