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
    /// The longest a token may be valid for: its `exp` is required, and no further than
    /// this from now (nor its `iat`, when given, further back).
    pub max_age: std::time::Duration,
    /// How far the issuer's clock may be from ours: allowed past `exp`, before `nbf` and
    /// `iat` (default 60 s).
    pub leeway: std::time::Duration,
}

impl Default for IdentityConfig {
    fn default() -> Self {
        Self {
            account_key: "account_id".to_owned(),
            signing_secret: None,
            claim: "sub".to_owned(),
            max_age: std::time::Duration::from_secs(24 * 3600),
            leeway: std::time::Duration::from_secs(60),
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
        Some(secret) => {
            let token = Token {
                claim: &config.claim,
                now: now_secs(),
                max_age: config.max_age.as_secs() as i64,
                leeway: config.leeway.as_secs() as i64,
                sender: &tracker.sender_id,
            };
            verify_hs256(value, secret.as_bytes(), &token)
        }
    })
}

fn now_secs() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

/// What a token is held to.
#[derive(Debug, Clone, Copy)]
pub struct Token<'a> {
    /// The claim naming the account.
    pub claim: &'a str,
    /// Unix seconds.
    pub now: i64,
    /// The longest validity accepted, in seconds.
    pub max_age: i64,
    /// The issuer's clock may be this many seconds from ours.
    pub leeway: i64,
    /// The conversation it is presented in: a token with a `sid` claim is good only there.
    pub sender: &'a str,
}

/// Verifies a compact HS256 JWT and returns its claim; `None` for anything invalid, without
/// `exp`, expired, valid for longer than the maximum age, not yet valid, or issued for
/// another conversation (`sid`).
pub fn verify_hs256(token: &str, secret: &[u8], held: &Token<'_>) -> Option<String> {
    let (claim, now) = (held.claim, held.now);
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
    let (exp, leeway) = (claims.get("exp")?.as_i64()?, held.leeway);
    if exp + leeway <= now || exp - now > held.max_age + leeway {
        return None;
    }
    if claims.get("iat").is_some_and(|iat| {
        iat.as_i64()
            .is_none_or(|iat| now - iat > held.max_age + leeway || iat > now + leeway)
    }) {
        return None;
    }
    if claims
        .get("sid")
        .is_some_and(|sid| sid.as_str() != Some(held.sender))
    {
        return None;
    }
    if claims
        .get("nbf")
        .is_some_and(|nbf| nbf.as_i64().is_none_or(|nbf| nbf > now + leeway))
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

    fn at(now: i64) -> Token<'static> {
        Token {
            claim: "sub",
            now,
            max_age: 86_400,
            leeway: 60,
            sender: "chat-1",
        }
    }

    #[test]
    fn only_a_valid_unexpired_token_names_the_account() {
        let token = sign_hs256(&json!({"sub": "acct-7", "exp": 2_000}), b"secret");
        assert_eq!(
            verify_hs256(&token, b"secret", &at(1_000)).as_deref(),
            Some("acct-7")
        );
        assert_eq!(verify_hs256(&token, b"other", &at(1_000)), None);
        assert_eq!(verify_hs256(&token, b"secret", &at(3_000)), None);
        // The issuer's clock may be a little ahead or behind: within the leeway past
        // `exp` (and before `nbf`), still good; beyond it, not.
        assert!(verify_hs256(&token, b"secret", &at(2_059)).is_some());
        assert_eq!(verify_hs256(&token, b"secret", &at(2_060)), None);
        let early = sign_hs256(
            &json!({"sub": "acct-7", "exp": 2_000, "nbf": 1_030, "iat": 1_030}),
            b"secret",
        );
        assert!(verify_hs256(&early, b"secret", &at(1_000)).is_some());
        assert_eq!(verify_hs256(&early, b"secret", &at(960)), None);
        let forged = token.replace(
            &token[token.find('.').unwrap() + 1..token.rfind('.').unwrap()],
            &URL_SAFE_NO_PAD.encode(json!({"sub": "acct-9", "exp": 2_000}).to_string()),
        );
        assert_eq!(verify_hs256(&forged, b"secret", &at(1_000)), None);
        let none_alg = format!(
            "{}.{}.",
            URL_SAFE_NO_PAD.encode(br#"{"alg":"none"}"#),
            URL_SAFE_NO_PAD.encode(json!({"sub": "acct-7"}).to_string())
        );
        assert_eq!(verify_hs256(&none_alg, b"secret", &at(1_000)), None);
        assert_eq!(verify_hs256("acct-7", b"secret", &at(1_000)), None);
    }

    #[test]
    fn a_token_needs_exp_within_the_maximum_age_and_its_own_conversation() {
        let sign = |claims: Value| sign_hs256(&claims, b"secret");
        // No exp: accepted forever before, refused now.
        assert_eq!(
            verify_hs256(&sign(json!({"sub": "acct-7"})), b"secret", &at(1_000)),
            None
        );
        // Valid for longer than the maximum age (and the leeway).
        let long = sign(json!({"sub": "acct-7", "exp": 1_000 + 86_400 + 61}));
        assert_eq!(verify_hs256(&long, b"secret", &at(1_000)), None);
        // Issued longer ago than the maximum age.
        let old = sign(json!({"sub": "acct-7", "exp": 100_000, "iat": 1_000}));
        assert_eq!(verify_hs256(&old, b"secret", &at(90_000)), None);
        // Bound to a conversation: good there only.
        let bound = sign(json!({"sub": "acct-7", "exp": 2_000, "sid": "chat-1"}));
        assert_eq!(
            verify_hs256(&bound, b"secret", &at(1_000)).as_deref(),
            Some("acct-7")
        );
        let elsewhere = Token {
            sender: "chat-2",
            ..at(1_000)
        };
        assert_eq!(verify_hs256(&bound, b"secret", &elsewhere), None);
    }
}
