//! `server::body::decode` for every `Content-Encoding`, with any limit: it never panics,
//! never returns more than the limit, and gives back exactly what was compressed.
//!
//! Input: byte 0 picks the encoding (low bits) and whether the rest is sent as is or
//! compressed here first (high bit); byte 1 picks the kind of limit and bytes 2-3 its
//! size; the rest is the body (or what gets compressed into it).
#![no_main]

use std::io::Write;

use actionserver::decode_body as decode;
use actionserver::ApiError;
use bytes::Bytes;
use flate2::write::{DeflateEncoder, GzEncoder, ZlibEncoder};
use flate2::Compression;
use libfuzzer_sys::fuzz_target;

#[path = "../oracles.rs"]
mod oracles;
use oracles::{limit, ENCODINGS};

/// What the server would be sent for `plain` in this encoding.
fn compress(encoding: &str, plain: &[u8], how: u8) -> Vec<u8> {
    let level = Compression::new(u32::from(how % 10));
    let encoding = encoding.trim().to_ascii_lowercase();
    match encoding.as_str() {
        "deflate" if how & 0x10 == 0 => {
            let mut e = ZlibEncoder::new(Vec::new(), level);
            e.write_all(plain).unwrap();
            e.finish().unwrap()
        }
        "deflate" => {
            let mut e = DeflateEncoder::new(Vec::new(), level);
            e.write_all(plain).unwrap();
            e.finish().unwrap()
        }
        "gzip" | "x-gzip" => {
            // Sometimes two members: the server reads them as one body.
            let split = if how & 0x08 == 0 {
                plain.len()
            } else {
                plain.len() / 2
            };
            let mut out = Vec::new();
            for part in [&plain[..split], &plain[split..]] {
                if part.is_empty() && !out.is_empty() {
                    continue;
                }
                let mut e = GzEncoder::new(Vec::new(), level);
                e.write_all(part).unwrap();
                out.extend(e.finish().unwrap());
            }
            out
        }
        _ => plain.to_vec(),
    }
}

fuzz_target!(|data: &[u8]| {
    let [pick, kind, hi, lo, rest @ ..] = data else {
        return;
    };
    let encoding = ENCODINGS[usize::from(pick & 0x7f) % ENCODINGS.len()];
    let compressed_here = pick & 0x80 != 0;
    let body = match (compressed_here, encoding) {
        (true, Some(e)) => compress(e, rest, *kind >> 3),
        _ => rest.to_vec(),
    };
    let max = limit(*kind, u16::from_be_bytes([*hi, *lo]), rest.len());
    let sent = body.len();
    match decode(encoding, Bytes::from(body), max) {
        Ok(out) => {
            let normalised = encoding.map(|e| e.trim().to_ascii_lowercase());
            let passes_through =
                matches!(normalised.as_deref(), None | Some("") | Some("identity"));
            // Undecoded bodies come back whole (the wire limit is not decode's job).
            if passes_through {
                assert_eq!(out.len(), sent, "an identity body came back changed");
            } else {
                assert!(
                    out.len() <= max,
                    "{} bytes decoded past the limit {max}",
                    out.len()
                );
            }
            if compressed_here {
                assert_eq!(&out[..], rest, "a compressed body did not decode to itself");
            }
        }
        Err(ApiError::TooLarge { limit }) => {
            assert_eq!(limit, max);
            // Refused as too large only when it really was.
            if compressed_here {
                assert!(
                    rest.len() > max,
                    "{} bytes refused at the limit {max}",
                    rest.len()
                );
            }
        }
        Err(ApiError::UnsupportedEncoding(_)) => {
            let e = encoding.expect("no encoding is always supported");
            let e = e.trim().to_ascii_lowercase();
            assert!(
                !matches!(e.as_str(), "" | "identity" | "deflate" | "gzip" | "x-gzip"),
                "{e:?} was refused"
            );
        }
        Err(ApiError::BadRequest { .. }) => {
            assert!(!compressed_here, "a valid compressed body was refused");
        }
        Err(other) => panic!("unexpected error: {other:?}"),
    }
});
