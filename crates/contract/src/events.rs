//! The service's change events as it delivers them, and their signature:
//! `Actiongate-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256 of "t.body">`, as Stripe
//! signs its webhooks. The service signs; the action server verifies with the same secret.

use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use sha2::Sha256;

use crate::model::{Change, Subscription};

/// The header carrying the signature.
pub const SIGNATURE_HEADER: &str = "Actiongate-Signature";

/// The type of an event raised by a change made under a request key.
pub const CHANGE_SCHEDULED: &str = "change.scheduled";

/// The type of an event raised by the administration route (`PUT`).
pub const SUBSCRIPTION_UPDATED: &str = "subscription.updated";

/// One event: what happened to one record, and the record as it became.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Event {
    pub id: String,
    #[serde(rename = "type")]
    pub kind: String,
    /// Unix seconds.
    pub created: i64,
    pub subscription: String,
    pub account: String,
    /// The record's revision after the change.
    pub revision: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_key: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub change: Option<Change>,
    pub record: Subscription,
}

/// Why a signature was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SignatureError {
    #[error("the signature header is missing")]
    Missing,
    #[error("the signature header is malformed")]
    Malformed,
    #[error("no signature matches the body")]
    Mismatch,
    #[error("the signature's timestamp is outside the tolerance")]
    OutsideTolerance,
}

fn mac(secret: &[u8], t: i64, body: &[u8]) -> Hmac<Sha256> {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret).expect("HMAC takes a key of any length");
    mac.update(t.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    mac
}

/// The header value signing `body` at `t` (unix seconds).
pub fn sign(secret: &[u8], t: i64, body: &[u8]) -> String {
    let digest = mac(secret, t, body).finalize().into_bytes();
    format!("t={t},v1={}", hex::encode(digest))
}

/// Checks a signature header against `body`: one `v1` must be the HMAC of `"t.body"`
/// (compared in constant time), and `t` within `tolerance` seconds of `now`, either way.
/// Returns `t`.
pub fn verify(
    secret: &[u8],
    header: Option<&str>,
    body: &[u8],
    now: i64,
    tolerance: i64,
) -> Result<i64, SignatureError> {
    let header = header.ok_or(SignatureError::Missing)?;
    let mut t = None;
    let mut signatures = Vec::new();
    for part in header.split(',') {
        match part.trim().split_once('=') {
            Some(("t", value)) => {
                t = Some(
                    value
                        .parse::<i64>()
                        .map_err(|_| SignatureError::Malformed)?,
                )
            }
            Some(("v1", value)) => signatures.push(value),
            // Other schemes are ignored, as Stripe's receivers do.
            Some(_) => {}
            None => return Err(SignatureError::Malformed),
        }
    }
    let t = t.ok_or(SignatureError::Malformed)?;
    if signatures.is_empty() {
        return Err(SignatureError::Malformed);
    }
    let expected = mac(secret, t, body);
    let matched = signatures.iter().any(|given| {
        hex::decode(given).is_ok_and(|given| expected.clone().verify_slice(&given).is_ok())
    });
    if !matched {
        return Err(SignatureError::Mismatch);
    }
    if (now - t).abs() > tolerance {
        return Err(SignatureError::OutsideTolerance);
    }
    Ok(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signature_verifies_and_any_change_breaks_it() {
        let header = sign(b"secret", 1_000, b"{\"a\":1}");
        assert_eq!(
            verify(b"secret", Some(&header), b"{\"a\":1}", 1_010, 300),
            Ok(1_000)
        );
        let wrong = |h: Option<&str>, body: &[u8], secret: &[u8], now| {
            verify(secret, h, body, now, 300).unwrap_err()
        };
        use SignatureError::*;
        assert_eq!(
            wrong(Some(&header), b"{\"a\":2}", b"secret", 1_000),
            Mismatch
        );
        assert_eq!(
            wrong(Some(&header), b"{\"a\":1}", b"other", 1_000),
            Mismatch
        );
        assert_eq!(
            wrong(Some(&header), b"{\"a\":1}", b"secret", 1_301),
            OutsideTolerance
        );
        assert_eq!(
            wrong(Some(&header), b"{\"a\":1}", b"secret", 699),
            OutsideTolerance
        );
        assert_eq!(wrong(None, b"{\"a\":1}", b"secret", 1_000), Missing);
        assert_eq!(wrong(Some("t=x,v1=00"), b"", b"secret", 1_000), Malformed);
        assert_eq!(wrong(Some("t=1000"), b"", b"secret", 1_000), Malformed);
        // The timestamp is signed: moving it breaks the signature.
        let moved = header.replace("t=1000", "t=1001");
        assert_eq!(
            wrong(Some(&moved), b"{\"a\":1}", b"secret", 1_000),
            Mismatch
        );
        // A second, correct v1 among wrong ones is accepted (secret rotation).
        let v1 = header.split_once("v1=").unwrap().1;
        let rotated = format!("t=1000,v1=00ff,v1={v1}");
        assert!(verify(b"secret", Some(&rotated), b"{\"a\":1}", 1_000, 300).is_ok());
    }
}
