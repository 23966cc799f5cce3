//! Reading a request body: a bound on the bytes received, then on the bytes they
//! decompress to (deflate as zlib or raw, and gzip; the header matched in any case), a
//! budget for the bytes of all the bodies held at once (taken as bytes arrive, never as
//! declared), and a minimum rate at which they must arrive.

use std::io::Read;
use std::sync::Arc;

use actix_web::http::header::{HeaderMap, CONTENT_ENCODING, CONTENT_LENGTH};
use actix_web::web;
use bytes::{Bytes, BytesMut};
use flate2::read::{DeflateDecoder, MultiGzDecoder, ZlibDecoder};
use futures_util::StreamExt;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::errors::ApiError;

/// The limits on one body.
#[derive(Debug, Clone, Copy)]
pub struct BodyLimits {
    /// Bytes on the wire.
    pub max_body: usize,
    /// Bytes after decompression.
    pub max_decompressed: usize,
    /// How long a body may take before it must keep [`Self::min_rate`], as nginx's
    /// `client_body_timeout` bounds a client that sends nothing: a body that has not
    /// arrived by `grace + received / min_rate` is cut off (408).
    pub grace: std::time::Duration,
    /// Bytes a second a body must arrive at, after the grace, on average.
    pub min_rate: usize,
}

impl Default for BodyLimits {
    fn default() -> Self {
        Self {
            max_body: 64 * 1024 * 1024,
            max_decompressed: 256 * 1024 * 1024,
            grace: std::time::Duration::from_secs(10),
            min_rate: 64 * 1024,
        }
    }
}

impl BodyLimits {
    /// When a body that has `received` bytes so far must have its next byte.
    fn deadline(&self, start: tokio::time::Instant, received: usize) -> tokio::time::Instant {
        let rate = self.min_rate.max(1) as f64;
        start + self.grace + std::time::Duration::from_secs_f64((received + 1) as f64 / rate)
    }
}

/// The bytes of request bodies the server holds at once, across all requests, as they
/// are received and decompressed. A request that would go past it gets 503 at once
/// (waiting while holding part of a body could leave every request waiting on another),
/// so many large bodies at once cannot exhaust memory.
#[derive(Debug, Clone)]
pub struct BodyBudget {
    /// One permit per KiB.
    kib: Arc<Semaphore>,
    bytes: usize,
}

/// The share of the budget one request holds, returned when it is dropped.
#[derive(Debug, Default)]
pub struct Held {
    permit: Option<OwnedSemaphorePermit>,
    kib: usize,
}

/// 1 GiB.
pub const DEFAULT_BODY_BUDGET: usize = 1024 * 1024 * 1024;

impl BodyBudget {
    /// A budget of this many bytes.
    pub fn new(bytes: usize) -> Self {
        let kib = bytes.div_ceil(1024).min(Semaphore::MAX_PERMITS);
        Self {
            kib: Arc::new(Semaphore::new(kib)),
            bytes,
        }
    }

    /// Grows `held` to cover `bytes`; `Busy` when the budget has no room.
    pub fn cover(&self, held: &mut Held, bytes: usize) -> Result<(), ApiError> {
        let needed = bytes.div_ceil(1024);
        if needed <= held.kib {
            return Ok(());
        }
        let more = u32::try_from(needed - held.kib).map_err(|_| self.busy())?;
        let permit = self
            .kib
            .clone()
            .try_acquire_many_owned(more)
            .map_err(|_| self.busy())?;
        match &mut held.permit {
            Some(p) => p.merge(permit),
            None => held.permit = Some(permit),
        }
        held.kib = needed;
        Ok(())
    }

    fn busy(&self) -> ApiError {
        ApiError::Busy(format!(
            "the server is holding as many request bodies as it may ({} bytes); try again shortly",
            self.bytes
        ))
    }
}

impl Default for BodyBudget {
    fn default() -> Self {
        Self::new(DEFAULT_BODY_BUDGET)
    }
}

/// Reads the whole body, refusing it as soon as it passes the limit or the budget. The
/// body's share of the budget is held until the returned [`Held`] is dropped.
pub async fn read(
    headers: &HeaderMap,
    mut payload: web::Payload,
    limits: BodyLimits,
    budget: &BodyBudget,
) -> Result<(Bytes, Held), ApiError> {
    let declared = headers
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    if declared.is_some_and(|n| n > limits.max_body) {
        return Err(ApiError::TooLarge {
            limit: limits.max_body,
        });
    }
    // The budget is taken as bytes arrive: a declared length that never comes holds none.
    let mut held = Held::default();
    let mut body = BytesMut::with_capacity(declared.unwrap_or(8 * 1024).min(64 * 1024));
    let start = tokio::time::Instant::now();
    loop {
        let next = tokio::time::timeout_at(limits.deadline(start, body.len()), payload.next());
        let Some(chunk) = next.await.map_err(|_| ApiError::TooSlow)? else {
            break;
        };
        let chunk = chunk
            .map_err(|e| ApiError::bad_request(format!("could not read the body: {e}"), None))?;
        if body.len() + chunk.len() > limits.max_body {
            return Err(ApiError::TooLarge {
                limit: limits.max_body,
            });
        }
        budget.cover(&mut held, body.len() + chunk.len())?;
        // Past the first 64 KiB, a body that keeps its declared length is given all of it
        // at once: one copy of each chunk, none of the whole on growing (a large tracker
        // otherwise moves most of its bytes two more times). Only what arrives is touched.
        if let Some(declared) = declared.filter(|&n| body.len() + chunk.len() <= n) {
            if chunk.len() > body.capacity() - body.len() {
                body.reserve(declared - body.len());
            }
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
    let received = body.len();
    let body = decode_within(
        encoding,
        body.freeze(),
        limits.max_decompressed,
        &mut |out| {
            // The compressed bytes stay held while they decompress.
            budget.cover(&mut held, received + out)
        },
    )?;
    Ok((body, held))
}

/// Decompresses a body according to its `Content-Encoding` (matched in any case),
/// refusing output beyond `max` bytes.
pub fn decode(encoding: Option<&str>, body: Bytes, max: usize) -> Result<Bytes, ApiError> {
    decode_within(encoding, body, max, &mut |_| Ok(()))
}

/// [`decode`], asking `cover` for room before the output grows to each new size.
fn decode_within(
    encoding: Option<&str>,
    body: Bytes,
    max: usize,
    cover: &mut dyn FnMut(usize) -> Result<(), ApiError>,
) -> Result<Bytes, ApiError> {
    let Some(encoding) = encoding else {
        return Ok(body);
    };
    let encoding = encoding.trim().to_ascii_lowercase();
    match encoding.as_str() {
        "" | "identity" => Ok(body),
        "deflate" if is_zlib(&body) => inflate(ZlibDecoder::new(&body[..]), max, cover),
        "deflate" => inflate(DeflateDecoder::new(&body[..]), max, cover),
        "gzip" | "x-gzip" => inflate(MultiGzDecoder::new(&body[..]), max, cover),
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

fn inflate(
    decoder: impl Read,
    max: usize,
    cover: &mut dyn FnMut(usize) -> Result<(), ApiError>,
) -> Result<Bytes, ApiError> {
    const STEP: usize = 256 * 1024;
    let mut out = Vec::new();
    // One byte past the limit tells "exactly at the limit" from "over it".
    let mut limited = decoder.take((max as u64).saturating_add(1));
    loop {
        // Each step is covered before it is allocated. Steps grow with the output (a
        // quarter of it, at least STEP), so the copies as it grows stay linear in its size
        // and the allocation never runs more than a step ahead of what was covered.
        let step = STEP.max(out.len() / 4);
        cover(out.len() + step)?;
        out.reserve_exact(step);
        let n = (&mut limited)
            .take(step as u64)
            .read_to_end(&mut out)
            .map_err(|e| {
                ApiError::bad_request(format!("the compressed body is invalid: {e}"), None)
            })?;
        if n == 0 {
            break;
        }
    }
    if out.len() > max {
        return Err(ApiError::TooLarge { limit: max });
    }
    Ok(out.into())
}
