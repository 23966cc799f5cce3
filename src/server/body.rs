//! Reading a request body: a bound on the bytes received, then on the bytes they
//! decompress to (deflate as zlib or raw, and gzip; the header matched in any case).

use std::io::Read;

use actix_web::http::header::{HeaderMap, CONTENT_ENCODING, CONTENT_LENGTH};
use actix_web::web;
use bytes::{Bytes, BytesMut};
use flate2::read::{DeflateDecoder, MultiGzDecoder, ZlibDecoder};
use futures_util::StreamExt;

use super::errors::ApiError;

/// The limits on one body.
#[derive(Debug, Clone, Copy)]
pub struct BodyLimits {
    /// Bytes on the wire.
    pub max_body: usize,
    /// Bytes after decompression.
    pub max_decompressed: usize,
}

impl Default for BodyLimits {
    fn default() -> Self {
        Self {
            max_body: 64 * 1024 * 1024,
            max_decompressed: 256 * 1024 * 1024,
        }
    }
}

/// Reads the whole body, refusing it as soon as it passes the limit.
pub async fn read(
    headers: &HeaderMap,
    mut payload: web::Payload,
    limits: BodyLimits,
) -> Result<Bytes, ApiError> {
    let declared = headers
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    if declared.is_some_and(|n| n > limits.max_body) {
        return Err(ApiError::TooLarge {
            limit: limits.max_body,
        });
    }
    let mut body = BytesMut::with_capacity(declared.unwrap_or(8 * 1024).min(limits.max_body));
    while let Some(chunk) = payload.next().await {
        let chunk = chunk
            .map_err(|e| ApiError::bad_request(format!("could not read the body: {e}"), None))?;
        if body.len() + chunk.len() > limits.max_body {
            return Err(ApiError::TooLarge {
                limit: limits.max_body,
            });
        }
        body.extend_from_slice(&chunk);
    }
    let encoding = match headers.get(CONTENT_ENCODING) {
        None => None,
        Some(value) => Some(
            value
                .to_str()
                .map_err(|_| ApiError::UnsupportedEncoding("<not text>".into()))?,
        ),
    };
    decode(encoding, body.freeze(), limits.max_decompressed)
}

/// Decompresses a body according to its `Content-Encoding` (matched in any case),
/// refusing output beyond `max` bytes.
pub fn decode(encoding: Option<&str>, body: Bytes, max: usize) -> Result<Bytes, ApiError> {
    let Some(encoding) = encoding else {
        return Ok(body);
    };
    let encoding = encoding.trim().to_ascii_lowercase();
    match encoding.as_str() {
        "" | "identity" => Ok(body),
        "deflate" if is_zlib(&body) => inflate(ZlibDecoder::new(&body[..]), max),
        "deflate" => inflate(DeflateDecoder::new(&body[..]), max),
        "gzip" | "x-gzip" => inflate(MultiGzDecoder::new(&body[..]), max),
        other => Err(ApiError::UnsupportedEncoding(other.to_owned())),
    }
}

/// A zlib stream starts with a CMF/FLG pair: method 8, and a check value divisible by 31.
fn is_zlib(body: &[u8]) -> bool {
    match body {
        [cmf, flg, ..] => cmf & 0x0f == 8 && (u16::from(*cmf) << 8 | u16::from(*flg)) % 31 == 0,
        _ => false,
    }
}

fn inflate(decoder: impl Read, max: usize) -> Result<Bytes, ApiError> {
    let mut out = Vec::new();
    // One byte past the limit tells "exactly at the limit" from "over it".
    decoder
        .take((max as u64).saturating_add(1))
        .read_to_end(&mut out)
        .map_err(|e| ApiError::bad_request(format!("the compressed body is invalid: {e}"), None))?;
    if out.len() > max {
        return Err(ApiError::TooLarge { limit: max });
    }
    Ok(out.into())
}
