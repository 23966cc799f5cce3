//! The fuzz targets' checks (fuzz/fuzz_targets/, run by scripts/fuzz.sh), replayed in the
//! ordinary test suite over every input kept in tests/fuzz_regressions/<target>/, over
//! the Rasa fixtures, and over hand-made nasty inputs (deep nesting, huge numbers,
//! invalid UTF-8, decompression bombs made here with flate2).
//!
//! Each folder's files are in the form its target reads, so a crash file from
//! fuzz/artifacts/<target>/ can be copied in as it is, except where noted:
//! - body_decode: the fuzz input itself (byte 0: encoding and "compress the rest here";
//!   byte 1: kind of limit and compression settings; bytes 2-3: a small limit; the rest:
//!   the body);
//! - webhook_parse: a webhook body;
//! - conversation_read: the tracker's `events` array as JSON (what the target's failure
//!   message prints; for a raw-form crash, the input without its first byte);
//! - guard: the JSON the target prints when the guard and the facts disagree.
//!
//! Three of the kept inputs reproduced bugs fuzzing found, since fixed: a decompression
//! limit of `usize::MAX` overflowed (`body_decode/usize-max-limit`), and bot metadata or a
//! whole event written as a JSON array was read by position
//! (`conversation_read/metadata-array.json`, `an_array_event_never_answers_the_question`).
//! One reproduced a bug in the oracle itself: a button's `/affirm` as the reply was taken for
//! a command (`conversation_read/button-reply.json`), where the reader and the reference
//! both read it as the button it is. And one a bug in the reader: of two bot messages between
//! the question and the reply, it named the earlier as the one the reply came after
//! (`conversation_read/two-messages-before-the-reply.json`).

use std::io::Write;
use std::path::PathBuf;

use bytes::Bytes;
use flate2::write::{DeflateEncoder, GzEncoder, ZlibEncoder};
use flate2::Compression;
use serde_json::{json, Value};

use actiongate::consent::Template;
use actiongate::consent::{check_conversation, compare_facts, ApplyInputs, ConsentConfig, Memory};
use actiongate::conversation::{
    self, Conversation, Given, Meaning, Question, Reading, Reply, Signals,
};
use actiongate::subscriptions::Subscription;
use actionserver::decode_body as decode;
use actionserver::ApiError;
use actionserver::{Tracker, WebhookRequest};

#[path = "../../fuzz/oracles.rs"]
mod oracles;
use oracles::{check_reader, check_webhook, every_fact_matches, limit, ENCODINGS};

const CONFIRM: &str = "utter_confirm_subscription_change";
const SELECT: &str = "select_subscription_change";

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The files kept for a target.
fn kept(target: &str) -> Vec<(String, Vec<u8>)> {
    let dir = root().join("tests/fuzz_regressions").join(target);
    let mut files: Vec<(String, Vec<u8>)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.is_file())
        .map(|path| {
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            (name, std::fs::read(&path).unwrap())
        })
        .collect();
    files.sort();
    files
}

fn fixtures() -> Vec<(String, Vec<u8>)> {
    let dir = root().join("tests/fixtures/rasa-3.6.21");
    let mut files: Vec<(String, Vec<u8>)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|e| e == "json"))
        .map(|path| {
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            (name, std::fs::read(&path).unwrap())
        })
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no Rasa fixtures");
    files
}

// ---------------------------------------------------------------------------------------
// body_decode

fn zlib(plain: &[u8], level: u32) -> Vec<u8> {
    let mut e = ZlibEncoder::new(Vec::new(), Compression::new(level));
    e.write_all(plain).unwrap();
    e.finish().unwrap()
}

fn raw_deflate(plain: &[u8], level: u32) -> Vec<u8> {
    let mut e = DeflateEncoder::new(Vec::new(), Compression::new(level));
    e.write_all(plain).unwrap();
    e.finish().unwrap()
}

fn gzip(plain: &[u8], level: u32) -> Vec<u8> {
    let mut e = GzEncoder::new(Vec::new(), Compression::new(level));
    e.write_all(plain).unwrap();
    e.finish().unwrap()
}

fn compress(encoding: &str, plain: &[u8], how: u8) -> Vec<u8> {
    let level = u32::from(how % 10);
    match encoding.trim().to_ascii_lowercase().as_str() {
        "deflate" if how & 0x10 == 0 => zlib(plain, level),
        "deflate" => raw_deflate(plain, level),
        "gzip" | "x-gzip" => {
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
                out.extend(gzip(part, level));
            }
            out
        }
        _ => plain.to_vec(),
    }
}

/// The body_decode target's checks on one input.
fn check_body(data: &[u8]) {
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
    check_decoded(encoding, body, max, compressed_here.then_some(rest));
}

/// `decode` never returns more than `max`, decodes what was compressed to itself, and
/// refuses only what it must.
fn check_decoded(encoding: Option<&str>, body: Vec<u8>, max: usize, plain: Option<&[u8]>) {
    let sent = body.len();
    match decode(encoding, Bytes::from(body), max) {
        Ok(out) => {
            let normalised = encoding.map(|e| e.trim().to_ascii_lowercase());
            if matches!(normalised.as_deref(), None | Some("") | Some("identity")) {
                assert_eq!(out.len(), sent, "an identity body came back changed");
            } else {
                assert!(out.len() <= max, "{} bytes past the limit {max}", out.len());
            }
            if let Some(plain) = plain {
                assert_eq!(
                    &out[..],
                    plain,
                    "a compressed body did not decode to itself"
                );
            }
        }
        Err(ApiError::TooLarge { limit }) => {
            assert_eq!(limit, max);
            if let Some(plain) = plain {
                assert!(plain.len() > max, "{} bytes refused at {max}", plain.len());
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
            assert!(plain.is_none(), "a valid compressed body was refused");
        }
        Err(other) => panic!("unexpected error: {other:?}"),
    }
}

#[test]
fn body_decode_regressions() {
    let files = kept("body_decode");
    assert!(!files.is_empty());
    for (name, data) in files {
        eprintln!("body_decode/{name}");
        check_body(&data);
    }
}

#[test]
fn decompression_bombs_stop_at_the_limit() {
    const MIB: usize = 1024 * 1024;
    let zeros = vec![0u8; 16 * MIB];
    let bombs = [
        ("gzip", gzip(&zeros, 9)),
        ("deflate", zlib(&zeros, 9)),
        ("deflate", raw_deflate(&zeros, 9)),
    ];
    for (encoding, bomb) in &bombs {
        assert!(bomb.len() < 64 * 1024, "{encoding}: {} bytes", bomb.len());
        for max in [0, 1, 4096, MIB] {
            match decode(Some(encoding), Bytes::from(bomb.clone()), max) {
                Err(ApiError::TooLarge { limit }) => assert_eq!(limit, max),
                other => panic!("{encoding} bomb at {max}: {other:?}"),
            }
        }
        let whole = decode(Some(encoding), Bytes::from(bomb.clone()), 16 * MIB).unwrap();
        assert_eq!(whole.len(), 16 * MIB);
    }
    // A small first gzip member, then a bomb: the members are read as one body.
    let mut members = gzip(b"{}", 6);
    members.extend(gzip(&zeros, 9));
    assert!(matches!(
        decode(Some("gzip"), Bytes::from(members), MIB),
        Err(ApiError::TooLarge { limit: MIB })
    ));
    // A bomb inside a bomb: one layer is undone, the inner bomb comes back as bytes.
    let nested = gzip(&gzip(&zeros, 9), 9);
    let inner = decode(Some("gzip"), Bytes::from(nested), MIB).unwrap();
    assert!(inner.len() < MIB && inner.starts_with(&[0x1f, 0x8b]));
}

#[test]
fn broken_compressed_bodies_are_refused_not_panicked_on() {
    let good = gzip(br#"{"next_action": "action_listen"}"#, 6);
    let mut cases: Vec<(&str, Vec<u8>)> = vec![
        ("gzip", good[..good.len() / 2].to_vec()),
        ("gzip", good[..10].to_vec()),
        ("gzip", vec![0x1f, 0x8b]),
        ("gzip", b"not compressed at all".to_vec()),
        ("deflate", vec![0x78, 0x9c]),
        ("deflate", vec![0x78, 0x9c, 0xff, 0xff, 0xff]),
        ("deflate", vec![0xff; 64]),
        ("gzip", Vec::new()),
        ("deflate", Vec::new()),
    ];
    let mut trailing = good.clone();
    trailing.extend_from_slice(b"trailing garbage");
    cases.push(("gzip", trailing));
    let mut bad_crc = good.clone();
    let n = bad_crc.len();
    bad_crc[n - 8] ^= 0xff;
    cases.push(("gzip", bad_crc));
    for (encoding, body) in cases {
        for max in [0, 16, 1 << 20, usize::MAX - 1] {
            // Refused or decoded within the limit; never a panic.
            check_decoded(Some(encoding), body.clone(), max, None);
        }
    }
    // Exactly at the limit passes; one byte less is refused.
    let plain = b"0123456789";
    check_decoded(Some("gzip"), gzip(plain, 6), 10, Some(plain));
    check_decoded(Some("deflate"), zlib(plain, 6), 9, Some(plain));
    check_decoded(Some("DEFLATE"), raw_deflate(plain, 0), 10, Some(plain));
    check_decoded(Some("x-gzip"), gzip(plain, 1), 0, Some(plain));
}

// ---------------------------------------------------------------------------------------
// webhook_parse

#[test]
fn webhook_parse_regressions_and_fixtures() {
    let mut files = kept("webhook_parse");
    files.extend(fixtures());
    for (name, data) in files {
        eprintln!("webhook_parse/{name}");
        check_webhook(&data);
    }
    // The fixtures do parse, with their events.
    for (name, data) in fixtures() {
        let request: WebhookRequest = serde_json::from_slice(&data).unwrap();
        let tracker = request.tracker.expect(&name);
        assert!(!tracker.events.is_empty(), "{name}");
    }
}

fn nested(depth: usize) -> String {
    format!("{}1{}", "[".repeat(depth), "]".repeat(depth))
}

#[test]
fn nasty_webhook_bodies_are_refused_or_read_without_panicking() {
    let deep = nested(100_000);
    let deep_object = format!("{}1{}", r#"{"a":"#.repeat(50_000), "}".repeat(50_000));
    let tracker = |events: &str| {
        format!(r#"{{"next_action":"x","tracker":{{"sender_id":"s","events":[{events}]}}}}"#)
    };
    let mut bodies: Vec<Vec<u8>> = vec![
        Vec::new(),
        b"null".to_vec(),
        b"[]".to_vec(),
        b"\xef\xbb\xbf{}".to_vec(),
        deep.clone().into_bytes(),
        deep_object.clone().into_bytes(),
        tracker(&format!(r#"{{"event":"user","text":{deep}}}"#)).into_bytes(),
        tracker(&format!(r#"{{"event":"bot","metadata":{deep_object}}}"#)).into_bytes(),
        format!(r#"{{"tracker":{{"sender_id":"s","slots":{{"a":{deep}}}}}}}"#).into_bytes(),
        format!(r#"{{"tracker":{{"sender_id":"s","latest_message":{deep_object}}}}}"#).into_bytes(),
        format!(r#"{{"domain":{deep},"tracker":{{"sender_id":"s"}}}}"#).into_bytes(),
        tracker(r#"{"event":"user","timestamp":1e999999}"#).into_bytes(),
        tracker(r#"{"event":"user","timestamp":-1e308,"text":"yes"}"#).into_bytes(),
        tracker(r#"{"event":"user","timestamp":123456789012345678901234567890}"#).into_bytes(),
        tracker(r#"{"event":"slot","name":"x","value":1e400}"#).into_bytes(),
        tracker(r#"{"event":"slot","name":"x","value":-0.0,"timestamp":-0}"#).into_bytes(),
        tracker(r#"{"event":"user","text":"\ud800"}"#).into_bytes(),
        tracker(r#"{"event":"user","text":"a\u0000b","input_channel":"\udbff\udfff"}"#)
            .into_bytes(),
        tracker(r#"{"event":"us\u0065r","timestamp":1,"text":"yes"}"#).into_bytes(),
        tracker(r#"{"event":"user","event":"bot"}"#).into_bytes(),
        tracker(r#"{"timestamp":1,"event":"user","timestamp":2}"#).into_bytes(),
        tracker(r#"{"event":""}"#).into_bytes(),
        tracker(r#"{"text":"no kind"}"#).into_bytes(),
        tracker(r#"["user",1]"#).into_bytes(),
        tracker(r#"{"event":"rewind"},{"event":"undo"},{"event":"restart"}"#).into_bytes(),
        br#"{"tracker":{"sender_id":"s","sender_id":"t"}}"#.to_vec(),
        br#"{"tracker":{"sender_id":"s","slots":{"a":1,"a":2}}}"#.to_vec(),
        br#"{"tracker":{"sender_id":"s","latest_message":{"intent_ranking":[{"name":"nlu_fallback"},{"name":5}]}}}"#.to_vec(),
    ];
    // Invalid UTF-8 inside a string, and a body that is not text at all.
    let mut invalid = tracker(r#"{"event":"user","text":"XX"}"#).into_bytes();
    let at = invalid.windows(2).position(|w| w == b"XX").unwrap();
    invalid[at] = 0xff;
    invalid[at + 1] = 0xc0;
    bodies.push(invalid);
    bodies.push((0..=255u8).collect());
    // Many events: linear, and readable.
    let many: Vec<String> = (0..20_000)
        .map(|i| match i % 4 {
            0 => r#"{"event":"action","timestamp":1,"name":"a"}"#.to_owned(),
            1 => r#"{"event":"user","timestamp":2,"text":"hi"}"#.to_owned(),
            2 => r#"{"event":"undo","timestamp":3}"#.to_owned(),
            _ => r#"{"event":"rewind"}"#.to_owned(),
        })
        .collect();
    bodies.push(tracker(&many.join(",")).into_bytes());
    for body in &bodies {
        check_webhook(body);
        if let Ok(request) = serde_json::from_slice::<WebhookRequest>(body) {
            if let Some(tracker) = &request.tracker {
                check_reader(tracker, body);
            }
        }
    }
    // Nesting past serde_json's limit is an error, not a stack overflow.
    assert!(serde_json::from_slice::<WebhookRequest>(deep.as_bytes()).is_err());
    // Deep nesting inside an event is kept raw (no stack overflow), and refused when read.
    let deep_event = tracker(&format!(r#"{{"event":"user","text":{deep}}}"#));
    if let Ok(request) = serde_json::from_str::<WebhookRequest>(&deep_event) {
        let tracker = request.tracker.unwrap();
        assert!(tracker.events[0].typed().is_err());
        let session = tracker.session_events();
        assert!(conversation::read(&session, &default_reading()).is_err());
    }
    let too_big = tracker(r#"{"event":"user","timestamp":1e999999}"#);
    assert!(serde_json::from_str::<WebhookRequest>(&too_big).is_err());
}

// ---------------------------------------------------------------------------------------
// conversation_read

/// One kept events array, as the target wraps it.
fn check_events(events: &[u8]) {
    let mut json = br#"{"sender_id":"fuzz","events":"#.to_vec();
    json.extend_from_slice(events);
    json.push(b'}');
    if let Ok(tracker) = serde_json::from_slice::<Tracker>(&json) {
        check_reader(&tracker, events);
    }
}

#[test]
fn conversation_read_regressions_and_fixtures() {
    let files = kept("conversation_read");
    assert!(!files.is_empty());
    for (name, data) in files {
        eprintln!("conversation_read/{name}");
        check_events(&data);
    }
    for (name, data) in fixtures() {
        eprintln!("conversation_read/{name}");
        let request: WebhookRequest = serde_json::from_slice(&data).unwrap();
        let tracker = request.tracker.unwrap();
        check_reader(&tracker, name.as_bytes());
        let events = serde_json::to_vec(&tracker.events).unwrap();
        check_events(&events);
    }
}

// ---------------------------------------------------------------------------------------
// guard

fn text_field(v: &Value, key: &str) -> Option<String> {
    v.get(key).and_then(Value::as_str).map(str::to_owned)
}

fn time(v: Option<&Value>) -> Option<f64> {
    match v? {
        Value::Null => None,
        Value::String(s) => Some(match s.as_str() {
            "NaN" => f64::NAN,
            "inf" => f64::INFINITY,
            "-inf" => f64::NEG_INFINITY,
            other => panic!("not a time: {other}"),
        }),
        n => Some(n.as_f64().expect("a time")),
    }
}

fn default_reading() -> Reading<'static> {
    static SIGNALS: std::sync::OnceLock<Signals> = std::sync::OnceLock::new();
    Reading {
        confirm_response: CONFIRM,
        select_action: SELECT,
        signals: SIGNALS.get_or_init(Signals::default),
    }
}

/// A guard case as the guard target prints it.
fn guard_case(case: &Value) -> (ApplyInputs, Subscription) {
    let memory = &case["memory"];
    let question = case
        .get("question")
        .filter(|q| !q.is_null())
        .map(|q| Question {
            text: text_field(q, "text").unwrap_or_default(),
            timestamp: time(q.get("timestamp")),
            position: q["position"].as_u64().unwrap_or(0) as usize,
        });
    let reply = case.get("reply").filter(|r| !r.is_null()).map(|r| Reply {
        text: text_field(r, "text").unwrap_or_default(),
        timestamp: time(r.get("timestamp")),
        message_id: text_field(r, "message_id"),
        meaning: match r["meaning"].as_str() {
            Some("yes") => Meaning::Yes,
            Some("no") => Meaning::No,
            Some("unclear") => Meaning::Unclear,
            other => panic!("not a meaning: {other:?}"),
        },
        given: if text_field(r, "text").is_some_and(|t| t.starts_with('/')) {
            Given::Payload
        } else {
            Given::Typed
        },
        after_other_message: text_field(r, "after_other_message"),
    });
    let template = case
        .get("template")
        .filter(|t| !t.is_null())
        .map(|t| Template {
            variations: serde_json::from_value(t["variations"].clone()).expect("variations"),
            values: serde_json::from_value(t["values"].clone()).expect("values"),
        });
    let selected_memory = case
        .get("selected_memory")
        .and_then(Value::as_object)
        .map(|m| m.iter().map(|(k, v)| (k.clone(), v.clone())).collect());
    let inputs = ApplyInputs {
        sender_id: text_field(case, "sender_id").unwrap_or_default(),
        account: text_field(case, "account"),
        requested_subscription: text_field(case, "requested_subscription"),
        requested_change_type: text_field(case, "requested_change_type"),
        memory: Memory {
            subscription: text_field(memory, "subscription"),
            label: text_field(memory, "label"),
            effective: text_field(memory, "effective"),
            entitlements: text_field(memory, "entitlements"),
            tag: text_field(memory, "tag"),
        },
        conversation: Conversation {
            question,
            reply,
            selected_memory,
        },
        template,
        shows_subscription: case["shows_subscription"].as_bool().unwrap_or(false),
    };
    let record = serde_json::from_value(case["record"].clone()).expect("a record");
    (inputs, record)
}

/// The guard target's check on one case; returns whether the guard approved.
fn check_guard(inputs: &ApplyInputs, record: &Subscription) -> bool {
    let approved = match check_conversation(inputs, &ConsentConfig::default()) {
        Err(_) => false,
        Ok(confirmation) => {
            assert_eq!(Some(&confirmation.account), inputs.account.as_ref());
            assert!(compare_facts(&confirmation, None).is_err(), "no record");
            compare_facts(&confirmation, Some(record)).is_ok()
        }
    };
    assert_eq!(
        approved,
        every_fact_matches(inputs, record),
        "the guard and the facts disagree:\n{inputs:#?}\n{record:#?}"
    );
    approved
}

#[test]
fn guard_regressions() {
    let files = kept("guard");
    assert!(!files.is_empty());
    let mut approved = 0;
    for (name, data) in &files {
        eprintln!("guard/{name}");
        let case: Value = serde_json::from_slice(data).unwrap();
        let (inputs, record) = guard_case(&case);
        let yes = check_guard(&inputs, &record);
        if let Some(expected) = case.get("expect_approved").and_then(Value::as_bool) {
            assert_eq!(yes, expected, "{name}");
        }
        approved += usize::from(yes);
    }
    // The kept cases include approvals, so the comparison is not only ever "both refuse".
    assert!(approved > 0);
}

/// Every single fact, broken alone, turns an approval into a refusal.
#[test]
fn guard_each_broken_fact_refuses() {
    let base: Value = serde_json::from_slice(
        &std::fs::read(root().join("tests/fuzz_regressions/guard/approved.json")).unwrap(),
    )
    .unwrap();
    let (inputs, record) = guard_case(&base);
    assert!(check_guard(&inputs, &record), "the base case approves");
    let breaks: Vec<(&str, Value)> = vec![
        ("/account", Value::Null),
        ("/memory/tag", json!("WS-SUB-3304 stop_renewal r4 x")),
        ("/memory/tag", json!("WS-SUB-3304 stop_renewal r-4")),
        (
            "/memory/tag",
            json!("WS-SUB-3304 stop_renewal r99999999999999999999"),
        ),
        ("/memory/effective", json!("")),
        ("/selected_memory", Value::Null),
        ("/selected_memory/change_label", json!(4)),
        ("/requested_change_type", json!("downgrade")),
        ("/question", Value::Null),
        ("/question/timestamp", json!("NaN")),
        ("/reply", Value::Null),
        ("/reply/meaning", json!("no")),
        ("/reply/meaning", json!("unclear")),
        ("/reply/timestamp", json!(1_700_000_601.5)),
        ("/reply/timestamp", json!(1_699_999_995.0)),
        ("/reply/timestamp", json!("inf")),
        (
            "/question/text",
            json!("Stop the renewal (GIFTWS-SUB-3304 stop_renewal r4)? stop the automatic renewal From 2027-01-01 00:00 UTC: October to December boxes ship as usual"),
        ),
        (
            "/question/text",
            json!("Stop the renewal (WS-SUB-3304 stop_renewal r4)? From 2027-01-01 00:00 UTC: October to December boxes ship as usual"),
        ),
        ("/template", json!({"variations": ["Something else entirely"], "values": {}})),
        ("/record/options/0/label", json!("cancel now")),
        ("/record/account", json!("acct-2")),
        ("/record/id", json!("WS-SUB-9")),
        ("/record/revision", json!(5)),
        (
            "/record/options/0/effective_at",
            json!("2027-01-02T00:00:00Z"),
        ),
        (
            "/record/options/0/effective_at",
            json!("2027-02-30T00:00:00Z"),
        ),
        ("/record/options/0/entitlements", json!("all benefits end")),
        ("/record/options/0/change_type", json!("downgrade")),
        // The product or plan moved (with the revision kept, as only a provider whose
        // revision is a fingerprint could show).
        ("/record/product", json!("Wine Club")),
        ("/record/plan", json!("yearly")),
        // A bot message between the question and the reply; a typed reply that is not a
        // plain yes.
        ("/reply/after_other_message", json!("utter_still_there")),
        ("/reply/text", json!("No, don't do it")),
        // The response shows the subscription, and the question does not name it.
        ("/shows_subscription", json!(true)),
    ];
    for (path, value) in breaks {
        let mut case = base.clone();
        *case.pointer_mut(path).unwrap_or_else(|| panic!("{path}")) = value.clone();
        if path == "/memory/tag" || path == "/memory/effective" {
            // The memory as select wrote it, so only the broken fact differs.
            let field = if path == "/memory/tag" {
                "change_tag"
            } else {
                "change_effective"
            };
            case["selected_memory"][field] = value.clone();
        }
        let (inputs, record) = guard_case(&case);
        assert!(
            !check_guard(&inputs, &record),
            "approved with {path} = {value}"
        );
    }
}

/// Same root cause as `metadata-array.json` (serde-derived structs also read a
/// JSON array, positionally): an event written as an array, `["user", 2]`, is accepted,
/// and answers the confirmation question with an empty text, while `typed()` refuses it.
#[test]
fn an_array_event_never_answers_the_question() {
    let json = r#"{"sender_id":"s","events":[
        {"event":"bot","text":"q","metadata":{"utter_action":"utter_confirm_subscription_change"}},
        ["user",2]]}"#;
    let Ok(tracker) = serde_json::from_str::<Tracker>(json) else {
        return; // refused: fixed
    };
    assert!(tracker.events[1].typed().is_err());
    let session = tracker.session_events();
    if let Ok(conversation) = conversation::read(&session, &default_reading()) {
        assert_eq!(
            conversation.reply, None,
            "an array counted as the customer's answer"
        );
    }
}
