//! `actiongate approvals list|approve|reject|sessions revoke`: the held changes from the
//! terminal, decided by the same guard, rules and audit as the server's; and an operator
//! signed out of the console everywhere.

use crate::app::{guard_for, StartError};
use crate::cli::{ApprovalsAction, ApprovalsArgs, AuditFormat, SessionsAction};
use crate::commands::audit::rfc3339;
use crate::config::{ConfigError, Settings};
use crate::consent::Outcome;
use crate::store::ApprovalState;

fn describe(outcome: &Outcome) -> String {
    let mut text = outcome.status.as_str().to_owned();
    if let Some(reason) = outcome.reason {
        text.push('/');
        text.push_str(reason.as_str());
    }
    if let Some(why) = &outcome.why {
        text.push_str(": ");
        text.push_str(why);
    }
    text
}

/// Runs one `approvals` command; what it prints.
pub async fn run(args: &ApprovalsArgs) -> Result<String, StartError> {
    use std::fmt::Write;
    let settings = Settings::resolve(&args.serve)?;
    let guard = guard_for(&settings).await?;
    let mut out = String::new();
    match &args.action {
        ApprovalsAction::Sessions {
            action: SessionsAction::Revoke { name },
        } => {
            let ended = guard.store().close_sessions_of(name).await?;
            tracing::info!(operator = %name, ended, "console sessions revoked");
            let _ = writeln!(out, "{ended} session(s) of {name} ended");
        }
        ApprovalsAction::List { all, format } => {
            let state = (!all).then_some(ApprovalState::Held);
            for held in guard.store().approvals(state).await? {
                match format {
                    AuditFormat::Json => {
                        let _ =
                            writeln!(out, "{}", serde_json::to_string(&held).expect("serialises"));
                    }
                    AuditFormat::Table => {
                        let outcome = guard.approval_outcome(&held).await?;
                        let _ = writeln!(
                            out,
                            "{}  {}  {} {} on {} (r{}), held by rule {}: {}",
                            rfc3339(held.created_at),
                            held.request_key,
                            held.account,
                            held.change_type,
                            held.subscription,
                            held.revision,
                            held.rule,
                            describe(&outcome)
                        );
                        let _ = writeln!(out, "  asked: {}", held.question);
                        let _ = writeln!(out, "  reply: {}", held.reply);
                    }
                }
            }
            if out.is_empty() && *format == AuditFormat::Table {
                out.push_str("no held changes\n");
            }
        }
        ApprovalsAction::Approve {
            key,
            operator,
            note,
        } => {
            let decision = guard
                .approve(key, operator, note.as_deref())
                .await?
                .ok_or_else(|| {
                    ConfigError::new("approvals", "key", format!("no held change {key}"))
                })?;
            let _ = writeln!(
                out,
                "{}{}",
                describe(&decision.outcome),
                if decision.held {
                    " (nothing sent; still held, to be approved again)"
                } else if decision.decided {
                    ""
                } else {
                    " (decided before; nothing done again)"
                }
            );
        }
        ApprovalsAction::Reject {
            key,
            operator,
            note,
        } => {
            let decision = guard.reject(key, operator, note).await?.ok_or_else(|| {
                ConfigError::new("approvals", "key", format!("no held change {key}"))
            })?;
            let _ = writeln!(
                out,
                "{}{}",
                describe(&decision.outcome),
                if decision.decided {
                    ""
                } else {
                    " (decided before; nothing done again)"
                }
            );
        }
    }
    guard.store().flush_audit().await;
    Ok(out)
}
