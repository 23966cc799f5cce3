//! The webhook body as JSON: parsing never panics and reads exactly the request reading the
//! bytes with serde reads (the walk over text is held to serde), every reading helper of a parsed tracker runs, and a tracker serialises
//! back to JSON that parses again with the same events (and serialises to the same bytes a
//! second time). The checks live in `fuzz/oracles.rs`.
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../oracles.rs"]
mod oracles;

fuzz_target!(|data: &[u8]| oracles::check_webhook(data));
