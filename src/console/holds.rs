//! The decisions: the held changes with their approve and reject forms, and the outcomes
//! pending verification with their check; each through the guard, audited with the
//! operator's name.

use super::*;

#[derive(serde::Deserialize)]
pub(super) struct Notice {
    #[serde(default)]
    notice: Option<String>,
}

pub(super) async fn held_page(
    req: HttpRequest,
    console: web::Data<Console>,
    q: web::Query<Notice>,
) -> HttpResponse {
    let (_, session) = match operator(&req, &console, true).await {
        Ok(s) => s,
        Err(refused) => return refused,
    };
    match console
        .guard
        .store()
        .approvals(Some(ApprovalState::Held))
        .await
    {
        Ok(items) => {
            let now = now_ms();
            let items: Vec<_> = items.into_iter().filter(|a| a.expires_at > now).collect();
            html(pages::held(
                (&session.operator, &session.csrf),
                &items,
                now,
                q.notice.as_deref(),
                console.guard.config().approval.max_open_per_account,
            ))
        }
        Err(e) => internal(e),
    }
}

pub(super) fn describe(outcome: &crate::consent::Outcome) -> String {
    let mut text = outcome.status.as_str().replace('_', " ");
    if let Some(r) = outcome.reason {
        text.push_str(" (");
        text.push_str(&r.as_str().replace('_', " "));
        text.push(')');
    }
    text
}

pub(super) fn with_notice(path: &str, notice: &str) -> String {
    format!(
        "{path}?notice={}",
        percent_encoding::utf8_percent_encode(notice, percent_encoding::NON_ALPHANUMERIC)
    )
}

pub(super) async fn approve(
    req: HttpRequest,
    console: web::Data<Console>,
    key: web::Path<String>,
    form: web::Form<HashMap<String, String>>,
) -> HttpResponse {
    let (_, session) = match form_operator(&req, &console, &form).await {
        Ok(s) => s,
        Err(refused) => return refused,
    };
    let note = form.get("note").map(|n| n.trim()).filter(|n| !n.is_empty());
    match console.guard.approve(&key, &session.operator, note).await {
        Ok(Some(d)) => {
            let what = if d.held {
                format!(
                    "Not sent: {}. The change is still held; approve it again once that has passed.",
                    describe(&d.outcome)
                )
            } else if d.decided {
                format!("Approved: {}.", describe(&d.outcome))
            } else {
                format!(
                    "Already decided: {}. Nothing was done again.",
                    describe(&d.outcome)
                )
            };
            see_other(&with_notice("/", &what))
        }
        Ok(None) => HttpResponse::NotFound().body("no such held change"),
        Err(e) => internal(e),
    }
}

pub(super) async fn reject(
    req: HttpRequest,
    console: web::Data<Console>,
    key: web::Path<String>,
    form: web::Form<HashMap<String, String>>,
) -> HttpResponse {
    let (_, session) = match form_operator(&req, &console, &form).await {
        Ok(s) => s,
        Err(refused) => return refused,
    };
    let note = form.get("note").map(|n| n.trim()).unwrap_or("");
    if note.is_empty() {
        return see_other(&with_notice(
            "/",
            "A rejection needs a note: the customer is told it.",
        ));
    }
    match console.guard.reject(&key, &session.operator, note).await {
        Ok(Some(d)) => {
            let what = if d.decided {
                "Rejected; nothing was sent.".to_owned()
            } else {
                format!(
                    "Already decided: {}. Nothing was done again.",
                    describe(&d.outcome)
                )
            };
            see_other(&with_notice("/", &what))
        }
        Ok(None) => HttpResponse::NotFound().body("no such held change"),
        Err(e) => internal(e),
    }
}

pub(super) async fn pending_page(
    req: HttpRequest,
    console: web::Data<Console>,
    q: web::Query<Notice>,
) -> HttpResponse {
    let (_, session) = match operator(&req, &console, true).await {
        Ok(s) => s,
        Err(refused) => return refused,
    };
    match console.guard.store().unresolved(Duration::ZERO).await {
        Ok(ops) => {
            let ops: Vec<_> = ops
                .into_iter()
                .filter(|op| matches!(op.state, OpState::Sent | OpState::Unknown))
                .collect();
            html(pages::pending(
                (&session.operator, &session.csrf),
                &ops,
                q.notice.as_deref(),
            ))
        }
        Err(e) => internal(e),
    }
}

pub(super) async fn check_now(
    req: HttpRequest,
    console: web::Data<Console>,
    key: web::Path<String>,
    form: web::Form<HashMap<String, String>>,
) -> HttpResponse {
    if let Err(refused) = form_operator(&req, &console, &form).await {
        return refused;
    }
    let store = console.guard.store();
    match store.operation(&key).await {
        Ok(Some(op)) => match console.guard.reconcile(&op).await {
            Ok(outcome) => see_other(&with_notice(
                "/pending",
                &format!("Checked: {}.", describe(&outcome)),
            )),
            Err(e) => internal(e),
        },
        Ok(None) => HttpResponse::NotFound().body("no such operation"),
        Err(e) => internal(e),
    }
}
