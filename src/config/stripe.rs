//! The settings of the Stripe provider (CONTRACT.md section 8), read from endpoints.yml's
//! `actiongate.subscriptions` and checked without calling Stripe.

use std::path::Path;
use std::time::Duration;

use super::sections::SubscriptionsSection;
use super::ConfigError;
use crate::subscriptions::stripe::record::{Offered, CANCEL_NOW, RESUME_RENEWAL, STOP_RENEWAL};
use crate::subscriptions::stripe::{StripeSettings, STRIPE_API_BASE};

/// The variable the API key is read from when the file gives none.
pub const API_KEY_VARIABLE: &str = "STRIPE_API_KEY";
/// The variable the webhook secret is read from when the file and the flag give none.
pub const WEBHOOK_SECRET_VARIABLE: &str = "STRIPE_WEBHOOK_SECRET";

/// `provider: stripe`'s settings, or the key that is wrong and why.
pub(super) fn stripe_settings(
    subs: &SubscriptionsSection,
    path: &Path,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<StripeSettings, ConfigError> {
    let fail = |key: &str, why: &str| {
        ConfigError::new(path, format!("actiongate.subscriptions.{key}"), why)
    };
    if subs.url.is_some() || subs.token.is_some() {
        return Err(fail(
            "url",
            "is a section 6 service's; with provider: stripe, changes go to Stripe (api_base)",
        ));
    }
    let api_key = subs
        .api_key
        .clone()
        .or_else(|| env(API_KEY_VARIABLE))
        .filter(|k| !k.is_empty())
        .ok_or_else(|| {
            fail(
                "api_key",
                "provider: stripe needs Stripe's API key (api_key, or STRIPE_API_KEY)",
            )
        })?;
    if !(api_key.starts_with("sk_") || api_key.starts_with("rk_")) {
        return Err(fail(
            "api_key",
            "must be a secret (sk_…) or restricted (rk_…) key; a publishable key cannot change subscriptions",
        ));
    }
    let api_base = subs
        .api_base
        .clone()
        .unwrap_or_else(|| STRIPE_API_BASE.to_owned());
    if !(api_base.starts_with("https://") || api_base.starts_with("http://")) {
        return Err(fail("api_base", "must be an http(s) URL"));
    }
    let mut offered = Offered {
        stop_renewal: false,
        resume_renewal: false,
        cancel_now: false,
    };
    for option in &subs.options {
        match option.as_str() {
            STOP_RENEWAL => offered.stop_renewal = true,
            RESUME_RENEWAL => offered.resume_renewal = true,
            CANCEL_NOW => offered.cancel_now = true,
            other => {
                return Err(fail(
                    "options",
                    &format!(
                    "{other:?} is not a Stripe option (stop_renewal, resume_renewal, cancel_now)"
                ),
                ))
            }
        }
    }
    let webhook_secret = subs
        .webhook_secret
        .clone()
        .or_else(|| env(WEBHOOK_SECRET_VARIABLE))
        .filter(|k| !k.is_empty());
    if webhook_secret
        .as_deref()
        .is_some_and(|s| !s.starts_with("whsec_"))
    {
        return Err(fail(
            "webhook_secret",
            "must be a webhook endpoint's signing secret (whsec_…)",
        ));
    }
    Ok(StripeSettings {
        api_key,
        api_base,
        offered,
        timeout: Duration::from_secs_f64(subs.timeout_secs.clamp(0.001, 300.0)),
        webhook_secret,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::sections::ProviderKind;

    fn read(subs: SubscriptionsSection, env: Option<&str>) -> Result<StripeSettings, String> {
        let env = env.map(str::to_owned);
        stripe_settings(&subs, Path::new("endpoints.yml"), &move |name| {
            (name == API_KEY_VARIABLE).then(|| env.clone()).flatten()
        })
        .map_err(|e| e.to_string())
    }

    fn stripe() -> SubscriptionsSection {
        SubscriptionsSection {
            provider: ProviderKind::Stripe,
            ..SubscriptionsSection::default()
        }
    }

    #[test]
    fn stripe_settings_are_checked_without_calling_stripe() {
        let s = read(stripe(), Some("sk_test_1")).unwrap();
        assert_eq!(
            (s.api_key.as_str(), s.api_base.as_str()),
            ("sk_test_1", STRIPE_API_BASE)
        );
        assert_eq!(
            s.offered,
            Offered::default(),
            "cancel_now only where listed"
        );
        let err = read(stripe(), None).unwrap_err();
        assert!(err.contains("actiongate.subscriptions.api_key"), "{err}");
        let err = read(stripe(), Some("pk_test_1")).unwrap_err();
        assert!(err.contains("publishable"), "{err}");
        let file_key = SubscriptionsSection {
            api_key: Some("rk_live_2".into()),
            api_base: Some("http://127.0.0.1:9".into()),
            options: vec!["cancel_now".into()],
            ..stripe()
        };
        let s = read(file_key, Some("sk_test_1")).unwrap();
        assert_eq!(s.api_key, "rk_live_2", "the file's key before the variable");
        assert_eq!(s.webhook_secret, None, "Stripe's events are optional");
        assert!(s.offered.cancel_now && !s.offered.stop_renewal);
        for (bad, key) in [
            (
                SubscriptionsSection {
                    options: vec!["refund".into()],
                    ..stripe()
                },
                "options",
            ),
            (
                SubscriptionsSection {
                    api_base: Some("ftp://x".into()),
                    ..stripe()
                },
                "api_base",
            ),
            (
                SubscriptionsSection {
                    url: Some("http://svc".into()),
                    ..stripe()
                },
                "url",
            ),
            (
                SubscriptionsSection {
                    webhook_secret: Some("sk_test_1".into()),
                    ..stripe()
                },
                "webhook_secret",
            ),
        ] {
            let err = read(bad, Some("sk_test_1")).unwrap_err();
            assert!(
                err.contains(&format!("actiongate.subscriptions.{key}")),
                "{err}"
            );
        }
    }
}
