//! Who may use the console: operators' argon2 password hashes, sessions kept in the store
//! under the digest of their cookie, the token every form carries, and the same-origin check
//! on every form sent.

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
pub fn cookie(
    name: &'static str,
    value: String,
    max_age: actix_web::cookie::time::Duration,
) -> Cookie<'static> {
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
