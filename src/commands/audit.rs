//! `actiongate audit`: the audit trail read from the store, as a table or JSON lines; with
//! `--mismatches`, the service events that contradicted an operation, for a person.

use crate::app::StartError;
use crate::config::ConfigError;
use crate::store::Store;

/// `actiongate audit`: prints the audit trail as a table or JSON lines.
pub async fn report(args: &crate::cli::AuditArgs) -> Result<String, StartError> {
    use std::fmt::Write;
    let url = args
        .database_url
        .clone()
        .unwrap_or_else(|| format!("sqlite:{}", args.data_dir.join("actiongate.db").display()));
    let since = match &args.since {
        None => None,
        Some(text) => {
            let at =
                time::OffsetDateTime::parse(text, &time::format_description::well_known::Rfc3339)
                    .map_err(|e| {
                    ConfigError::new("--since", "since", format!("{text:?} is not RFC 3339: {e}"))
                })?;
            Some((at.unix_timestamp_nanos() / 1_000_000) as i64)
        }
    };
    let store = Store::connect(&url).await?;
    if args.mismatches {
        return mismatches(&store, args.format).await;
    }
    let entries = store.audit_entries(args.sender.as_deref(), since).await?;
    let mut out = String::new();
    match args.format {
        crate::cli::AuditFormat::Json => {
            for entry in &entries {
                let _ = writeln!(
                    out,
                    "{}",
                    serde_json::to_string(entry).expect("an entry serialises")
                );
            }
        }
        crate::cli::AuditFormat::Table => {
            let _ = writeln!(
                out,
                "{:<24} {:<28} {:<20} {:<10} {:<32} {:<21} reason",
                "at", "action", "sender", "account", "target", "status"
            );
            for e in &entries {
                let at = rfc3339(e.at);
                let _ = writeln!(
                    out,
                    "{:<24} {:<28} {:<20} {:<10} {:<32} {:<21} {}",
                    at,
                    e.action,
                    e.sender_id,
                    e.account.as_deref().unwrap_or("-"),
                    e.target.as_deref().unwrap_or("-"),
                    e.status,
                    e.reason.as_deref().unwrap_or("-")
                );
            }
        }
    }
    Ok(out)
}

/// Milliseconds since the epoch, as RFC 3339.
pub(crate) fn rfc3339(ms: i64) -> String {
    time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000)
        .ok()
        .and_then(|t| {
            t.format(&time::format_description::well_known::Rfc3339)
                .ok()
        })
        .unwrap_or_default()
}

/// The mismatched service events, each with the operation its request key names (the
/// original request and the confirmed terms), oldest first.
async fn mismatches(store: &Store, format: crate::cli::AuditFormat) -> Result<String, StartError> {
    use std::fmt::Write;
    let mut out = String::new();
    for event in store.received_events(Some("mismatch")).await? {
        let op = match &event.request_key {
            Some(key) => store.operation(key).await?,
            None => None,
        };
        match format {
            crate::cli::AuditFormat::Json => {
                let line = serde_json::json!({
                    "event": event.id,
                    "received_at": rfc3339(event.received_at),
                    "type": event.kind,
                    "subscription": event.subscription,
                    "account": event.account,
                    "revision": event.revision,
                    "request_key": event.request_key,
                    "why": event.detail,
                    "operation": op,
                    "delivered": serde_json::from_str::<serde_json::Value>(&event.body).ok(),
                });
                let _ = writeln!(out, "{line}");
            }
            crate::cli::AuditFormat::Table => {
                let _ = writeln!(
                    out,
                    "{}  event {} ({}): {} of {} at r{}",
                    rfc3339(event.received_at),
                    event.id,
                    event.kind,
                    event.subscription,
                    event.account,
                    event.revision
                );
                let _ = writeln!(out, "  why: {}", event.detail.as_deref().unwrap_or("-"));
                match op {
                    Some(op) => {
                        let _ = writeln!(
                            out,
                            "  request {}: conversation {} ({}) asked for {} on {} at r{}; now {}",
                            op.request_key,
                            op.sender_id,
                            op.account,
                            op.change_type,
                            op.subscription,
                            op.revision,
                            op.state.as_str()
                        );
                        let _ = writeln!(out, "  confirmed terms: {}", op.terms);
                    }
                    None => {
                        let _ = writeln!(
                            out,
                            "  request {}: no operation of ours",
                            event.request_key.as_deref().unwrap_or("-")
                        );
                    }
                }
            }
        }
    }
    if out.is_empty() && format == crate::cli::AuditFormat::Table {
        out.push_str("no mismatched service events\n");
    }
    Ok(out)
}
