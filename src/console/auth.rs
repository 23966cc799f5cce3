//! Who may use the console: operators' argon2 password hashes, sessions kept in the store
//! under the digest of their cookie and bound to the credential they were opened with, the
//! token every form carries, the same-origin check on every form sent, and the limit on
//! sign-in attempts.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use actix_web::cookie::{Cookie, SameSite};
use actix_web::HttpRequest;
use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use argon2::Argon2;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// The session cookie's name.
pub const SESSION_COOKIE: &str = "ag_session";

/// The sign-in form's own token, in a cookie of its own (no session exists yet).
pub const SIGN_IN_COOKIE: &str = "ag_sign_in";

/// 32 random bytes, hex.
pub fn token() -> String {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).expect("the system's random source works");
    hex::encode(bytes)
}

/// The digest a session is stored under.
pub fn digest(cookie: &str) -> String {
    hex::encode(Sha256::digest(cookie.as_bytes()))
}

/// Whether two tokens are equal, in constant time.
pub fn same(a: &str, b: &str) -> bool {
    let (a, b): ([u8; 32], [u8; 32]) = (Sha256::digest(a).into(), Sha256::digest(b).into());
    bool::from(a.ct_eq(&b))
}

/// The argon2 hash (PHC string) of a password, with a fresh salt.
pub fn hash_password(password: &str) -> String {
    let mut salt = [0u8; 16];
    getrandom::fill(&mut salt).expect("the system's random source works");
    let salt = SaltString::encode_b64(&salt).expect("16 bytes make a salt");
    Argon2::default()
        .hash_password(password.as_bytes(), &salt)
        .expect("argon2 hashes any password")
        .to_string()
}

/// Checks a name and password against the configured operators. The hash is verified even
/// for an unknown name (against a fixed one), so the time taken does not tell which names
/// exist.
pub fn check_password(operators: &[(String, String)], name: &str, password: &str) -> bool {
    static UNKNOWN: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    let found = operators.iter().find(|(n, _)| n == name);
    let hash = match found {
        Some((_, hash)) => hash.as_str(),
        None => UNKNOWN.get_or_init(|| hash_password("not an operator")),
    };
    let verified = PasswordHash::new(hash).is_ok_and(|parsed| {
        Argon2::default()
            .verify_password(password.as_bytes(), &parsed)
            .is_ok()
    });
    verified && found.is_some()
}

/// A cookie the console sets: HttpOnly, Secure (browsers accept it on 127.0.0.1 and
/// localhost over plain HTTP, and need HTTPS anywhere else), SameSite=Strict.
pub fn cookie(name: &'static str, value: String, max_age: time::Duration) -> Cookie<'static> {
    Cookie::build(name, value)
        .path("/")
        .http_only(true)
        .secure(true)
        .same_site(SameSite::Strict)
        .max_age(max_age)
        .finish()
}

/// A form sent from another origin is refused: when the browser names the origin
/// (`Origin`, or else `Referer`), it must be this console's own.
pub fn same_origin(req: &HttpRequest) -> bool {
    let host = req.connection_info().host().to_owned();
    let named = req
        .headers()
        .get("origin")
        .or_else(|| req.headers().get("referer"))
        .and_then(|v| v.to_str().ok());
    match named {
        // A form sent by a browser always names it; a tool that names none gets the
        // CSRF token check alone.
        None => true,
        Some(origin) => {
            let rest = origin
                .strip_prefix("http://")
                .or_else(|| origin.strip_prefix("https://"))
                .unwrap_or("");
            let authority = rest.split('/').next().unwrap_or("");
            authority.eq_ignore_ascii_case(&host)
        }
    }
}

/// The fingerprint a session is bound to: the SHA-256 of the operator's configured password
/// hash, or `None` when no operator has that name. A changed password or a removed operator
/// changes it, which ends their sessions.
pub fn credential(operators: &[(String, String)], name: &str) -> Option<String> {
    operators
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, hash)| hex::encode(Sha256::digest(hash.as_bytes())))
}

/// Failed sign-ins, by operator name and by peer address: after [`FREE_TRIES`] failures a
/// key is locked for a time that doubles with each further failure (up to [`LONGEST_LOCK`]);
/// while locked, sign-ins for it are answered 429 with `Retry-After` and no password is
/// checked. A success clears its keys. Each replica keeps its own count.
#[derive(Debug, Default)]
pub struct Throttle {
    keys: Mutex<HashMap<String, Failures>>,
}

#[derive(Debug, Clone, Copy)]
struct Failures {
    count: u32,
    until: Option<Instant>,
    last: Instant,
}

/// Failed sign-ins allowed before a key is locked.
pub const FREE_TRIES: u32 = 5;
/// The longest lock.
pub const LONGEST_LOCK: Duration = Duration::from_secs(15 * 60);
/// Keys kept at most; the oldest go first (a flood of addresses cannot grow it unbounded).
const MOST_KEYS: usize = 10_000;

impl Throttle {
    /// How long until a sign-in for any of `keys` may be tried, when one is locked.
    pub fn retry_after(&self, keys: &[String]) -> Option<Duration> {
        let now = Instant::now();
        let map = self.keys.lock().unwrap_or_else(|p| p.into_inner());
        keys.iter()
            .filter_map(|k| map.get(k).and_then(|f| f.until))
            .filter(|until| *until > now)
            .map(|until| until - now)
            .max()
    }

    /// A sign-in for `keys` failed.
    pub fn failed(&self, keys: &[String]) {
        let now = Instant::now();
        let mut map = self.keys.lock().unwrap_or_else(|p| p.into_inner());
        if map.len() >= MOST_KEYS {
            let oldest = map
                .iter()
                .min_by_key(|(_, f)| f.last)
                .map(|(k, _)| k.clone());
            if let Some(oldest) = oldest {
                map.remove(&oldest);
            }
        }
        for key in keys {
            let f = map.entry(key.clone()).or_insert(Failures {
                count: 0,
                until: None,
                last: now,
            });
            f.count += 1;
            f.last = now;
            if f.count >= FREE_TRIES {
                let doublings = (f.count - FREE_TRIES).min(10);
                let lock = Duration::from_secs(1u64 << doublings).min(LONGEST_LOCK);
                f.until = Some(now + lock);
            }
        }
    }

    /// A sign-in for `keys` succeeded.
    pub fn succeeded(&self, keys: &[String]) {
        let mut map = self.keys.lock().unwrap_or_else(|p| p.into_inner());
        for key in keys {
            map.remove(key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_locked_after_the_free_tries_for_ever_longer() {
        let throttle = Throttle::default();
        let keys = ["name:ana".to_owned(), "peer:10.0.0.1".to_owned()];
        for _ in 0..FREE_TRIES - 1 {
            throttle.failed(&keys);
            assert_eq!(throttle.retry_after(&keys), None);
        }
        throttle.failed(&keys);
        let first = throttle.retry_after(&keys).expect("locked");
        assert!(first <= Duration::from_secs(1));
        throttle.failed(&keys);
        let second = throttle.retry_after(&keys).expect("locked");
        assert!(second > first && second <= Duration::from_secs(2));
        // Another name from another address is not locked; the same address is.
        assert_eq!(throttle.retry_after(&["name:ben".to_owned()]), None);
        assert!(throttle
            .retry_after(&["name:ben".to_owned(), "peer:10.0.0.1".to_owned()])
            .is_some());
        throttle.succeeded(&keys);
        assert_eq!(throttle.retry_after(&keys), None);
    }

    #[test]
    fn a_session_is_bound_to_the_hash_it_was_opened_with() {
        let operators = vec![("ana".to_owned(), "$argon2id$one".to_owned())];
        let before = credential(&operators, "ana").unwrap();
        let changed = vec![("ana".to_owned(), "$argon2id$two".to_owned())];
        assert_ne!(credential(&changed, "ana").unwrap(), before);
        assert_eq!(credential(&operators, "ben"), None);
    }
}
