//! `actiongate audit`: the audit trail read from the store, as a table or JSON lines.

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
                let at =
                    time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(e.at) * 1_000_000)
                        .ok()
                        .and_then(|t| {
                            t.format(&time::format_description::well_known::Rfc3339)
                                .ok()
                        })
                        .unwrap_or_default();
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
