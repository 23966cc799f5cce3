//! Who the customer is: the account from the session's start metadata, never from a slot
//! the model or the customer can set. With a signing secret, the value must be an HS256
//! token whose claim names the account.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use hmac::{Hmac, Mac};
use serde_json::Value;
use sha2::Sha256;

use crate::conversation::{self, MalformedEvent, SessionIdentity};
use actionserver::Tracker;

/// How the account is read.
#[derive(Debug, Clone)]
pub struct IdentityConfig {
    /// The key in `session_started_metadata` (default `account_id`).
    pub account_key: String,
    /// When set, the value is an HS256 token signed with this secret.
    pub signing_secret: Option<String>,
    /// The claim of the token that names the account (default `sub`).
    pub claim: String,
}

impl Default for IdentityConfig {
    fn default() -> Self {
        Self {
            account_key: "account_id".to_owned(),
            signing_secret: None,
            claim: "sub".to_owned(),
        }
    }
}

/// The slot Rasa fills with the metadata of the session's start.
pub const SESSION_METADATA_SLOT: &str = "session_started_metadata";

/// The authenticated account of this conversation, if any (CONTRACT.md section 2): the
/// value the current session's start wrote (which a `/restart` does not undo), or, when no
/// such write is in view (Rasa trimmed the front), the slot's value now. A write of the
/// metadata anywhere else in the current session makes the identity untrusted (`None`),
/// whatever it says.
pub fn account(
    tracker: &Tracker<'_>,
    config: &IdentityConfig,
) -> Result<Option<String>, MalformedEvent> {
    let metadata = match conversation::session_identity(&tracker.events, SESSION_METADATA_SLOT)? {
        SessionIdentity::Rewritten => {
            tracing::warn!(
                sender = %tracker.sender_id,
                "the session's identity was written outside the session's start; it is not trusted"
            );
            return Ok(None);
        }
        SessionIdentity::Started(Some(written)) => {
            // The slot may be null (a restart resets it) but never something else.
            let now = tracker.get_slot(SESSION_METADATA_SLOT);
            if now.is_some_and(|now| !now.is_null() && *now != written) {
                tracing::warn!(
                    sender = %tracker.sender_id,
                    "the session's identity in the slots is not what its start wrote; it is not trusted"
                );
                return Ok(None);
            }
            written
        }
        SessionIdentity::Started(None) => tracker
            .get_slot(SESSION_METADATA_SLOT)
            .cloned()
            .unwrap_or(Value::Null),
    };
    let Some(value) = metadata
        .get(&config.account_key)
        .and_then(Value::as_str)
        .map(str::trim)
        .filter(|v| !v.is_empty())
    else {
        return Ok(None);
    };
    Ok(match &config.signing_secret {
        None => Some(value.to_owned()),
        Some(secret) => verify_hs256(value, secret.as_bytes(), &config.claim, now_secs()),
    })
}

fn now_secs() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

/// Verifies a compact HS256 JWT and returns its `claim`; `None` for anything invalid,
/// expired or not yet valid.
pub fn verify_hs256(token: &str, secret: &[u8], claim: &str, now: i64) -> Option<String> {
    let mut parts = token.split('.');
    let (header, payload, signature) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() {
        return None;
    }
    let header: Value = serde_json::from_slice(&URL_SAFE_NO_PAD.decode(header).ok()?).ok()?;
    if header.get("alg")?.as_str()? != "HS256" {
        return None;
    }
    let mut mac = Hmac::<Sha256>::new_from_slice(secret).ok()?;
    mac.update(&token.as_bytes()[..token.rfind('.')?]);
    mac.verify_slice(&URL_SAFE_NO_PAD.decode(signature).ok()?)
        .ok()?;
    let claims: Value = serde_json::from_slice(&URL_SAFE_NO_PAD.decode(payload).ok()?).ok()?;
    if claims
        .get("exp")
        .is_some_and(|exp| exp.as_i64().is_none_or(|exp| exp <= now))
    {
        return None;
    }
    if claims
        .get("nbf")
        .is_some_and(|nbf| nbf.as_i64().is_none_or(|nbf| nbf > now))
    {
        return None;
    }
    let account = claims.get(claim)?.as_str()?;
    (!account.is_empty()).then(|| account.to_owned())
}

/// Signs claims as an HS256 token (for tests and for tools that mint session tokens).
pub fn sign_hs256(claims: &Value, secret: &[u8]) -> String {
    let header = URL_SAFE_NO_PAD.encode(br#"{"alg":"HS256","typ":"JWT"}"#);
    let payload = URL_SAFE_NO_PAD.encode(claims.to_string());
    let mut mac = Hmac::<Sha256>::new_from_slice(secret).expect("HMAC takes any key length");
    mac.update(format!("{header}.{payload}").as_bytes());
    let signature = URL_SAFE_NO_PAD.encode(mac.finalize().into_bytes());
    format!("{header}.{payload}.{signature}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn only_a_valid_unexpired_token_names_the_account() {
        let token = sign_hs256(&json!({"sub": "acct-7", "exp": 2_000}), b"secret");
        assert_eq!(
            verify_hs256(&token, b"secret", "sub", 1_000).as_deref(),
            Some("acct-7")
        );
        assert_eq!(verify_hs256(&token, b"other", "sub", 1_000), None);
        assert_eq!(verify_hs256(&token, b"secret", "sub", 3_000), None);
        let forged = token.replace(
            &token[token.find('.').unwrap() + 1..token.rfind('.').unwrap()],
            &URL_SAFE_NO_PAD.encode(json!({"sub": "acct-9", "exp": 2_000}).to_string()),
        );
        assert_eq!(verify_hs256(&forged, b"secret", "sub", 1_000), None);
        let none_alg = format!(
            "{}.{}.",
            URL_SAFE_NO_PAD.encode(br#"{"alg":"none"}"#),
            URL_SAFE_NO_PAD.encode(json!({"sub": "acct-7"}).to_string())
        );
        assert_eq!(verify_hs256(&none_alg, b"secret", "sub", 1_000), None);
        assert_eq!(verify_hs256("acct-7", b"secret", "sub", 1_000), None);
    }
}
