//! Which flag stands for which endpoints.yml key, and the order figment merges them in.

use std::path::Path;

use super::{ConfigError, Section};
use crate::cli::ServeArgs;

/// Flags, and the environment variables clap reads for them, over endpoints.yml's
/// `actiongate:` section (itself over the defaults): each flag with the key it stands for,
/// merged by figment. A flag left unset leaves the file's value.
pub(super) fn layered(
    args: &ServeArgs,
    file: Option<&Section>,
    path: &Path,
) -> Result<Section, ConfigError> {
    use figment::providers::Serialized;
    let file = file.cloned().unwrap_or_default();
    let mut figment = figment::Figment::from(Serialized::defaults(file));
    macro_rules! flags {
        ($($key:literal => $flag:expr),* $(,)?) => {
            $(if let Some(value) = $flag {
                figment = figment.merge(Serialized::global($key, value));
            })*
        };
    }
    flags! {
        "data_dir" => args.data_dir.as_ref(),
        "database_url" => args.database_url.as_ref(),
        "subscriptions.url" => args.subscriptions_url.as_ref(),
        "subscriptions.provider" => args.subscriptions_provider.as_ref(),
        "subscriptions.api_base" => args.stripe_api_base.as_ref(),
        "subscriptions.webhook_secret" => args.stripe_webhook_secret.as_ref(),
        "subscriptions.token" => args.subscriptions_token.as_ref(),
        "subscriptions.timeout_secs" => args.subscriptions_timeout,
        "subscriptions.max_in_flight" => args.subscriptions_max_in_flight,
        "embedded_service.port" => args.embedded_service_port,
        "embedded_service.command_delay_ms" => args.embedded_command_delay_ms,
        "server.body_limit" => args.body_limit,
        "server.decompressed_limit" => args.decompressed_limit,
        "server.body_budget" => args.body_budget,
        "server.token_name" => args.token_name.as_ref(),
        "server.workers" => args.workers,
        "server.grpc" => args.grpc.then_some(true),
        "server.grpc_port" => args.grpc_port,
        "server.ssl_ca_file" => args.ssl_ca_file.as_ref(),
        "consent.window_secs" => args.confirmation_window,
        "consent.clock_skew_secs" => args.clock_skew,
        "consent.confirm_slot" => args.confirm_slot.as_ref(),
        "consent.min_confidence" => args.min_confidence,
        "consent.plain_yes" => args.plain_yes,
        "consent.question" => args.consent_question,
        "consent.signing_secret" => args.signing_secret.as_ref(),
        "consent.account_key" => args.account_key.as_ref(),
        "rate_limit.capacity" => args.rate_capacity,
        "rate_limit.per_hour" => args.rate_per_hour,
        "audit.retention_days" => args.audit_retention_days,
        "events.port" => args.events_port,
        "events.host" => args.events_host.as_ref(),
        "events.secret" => args.events_secret.as_ref(),
        "events.tolerance_secs" => args.events_tolerance,
        "console.port" => args.admin_port,
        "console.host" => args.admin_host.as_ref(),
    }
    figment.extract().map_err(|e| {
        ConfigError::new(
            path,
            format!("actiongate.{}", e.path.join(".")),
            e.kind.to_string(),
        )
    })
}
