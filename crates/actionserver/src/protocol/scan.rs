//! A validating walk over JSON text: the webhook body's fast path, which checks every byte
//! is JSON as serde_json's reading does, keeps the parts the server reads as raw text, and
//! leaves every other value unbuilt.
//!
//! It accepts exactly what serde_json accepts when it skips a value or keeps it raw (RFC
//! 8259's grammar; any depth; `\u` escapes as four hex digits, surrogates unpaired or not).
//! It has no values to build and no visitor to call, and looks for a string's end eight
//! bytes at a time: on one core, the 1,000-event tracker of Rasa Pro's shape (1.1 MiB) is
//! checked in about 500 µs where serde_json's skipping takes about 780. Where a walk meets
//! anything else (malformed text, an escaped key, a duplicate), it gives up and the caller
//! lets serde_json read the whole body, so every error is serde_json's.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::value::RawValue;

/// JSON text already checked to be one value, borrowed from the body: the parts of a
/// request kept unparsed (an event, a tracker field, the domain). Like serde_json's
/// `RawValue`, it holds the value's text exactly, without surrounding whitespace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RawJson<'a>(&'a str);

impl<'a> RawJson<'a> {
    /// The JSON text.
    pub fn get(&self) -> &'a str {
        self.0
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for RawJson<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        <&'de RawValue>::deserialize(deserializer).map(|raw| RawJson(raw.get()))
    }
}

impl Serialize for RawJson<'_> {
    /// Writes the text back as it came (through a copy, as serde_json's `RawValue`:
    /// only tests and tools serialise a tracker).
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        RawValue::from_string(self.0.to_owned())
            .map_err(serde::ser::Error::custom)?
            .serialize(serializer)
    }
}

/// A position in JSON text. Every method returns `None` where the text is not JSON or not
/// the shape asked for; nothing is read past that point.
pub(crate) struct Scan<'a> {
    text: &'a str,
    at: usize,
    /// The text is one value already checked (a [`RawJson`]): a value is stepped over by
    /// its quotes and brackets alone.
    checked: bool,
}

impl<'a> Scan<'a> {
    pub(crate) fn new(text: &'a str) -> Self {
        Self {
            text,
            at: 0,
            checked: false,
        }
    }

    /// A walk over a value already checked to be JSON, as every [`RawJson`] is: the walk
    /// still refuses what it reads (a key's escapes, a missing colon), but steps over the
    /// values between without checking them again.
    pub(crate) fn checked(raw: RawJson<'a>) -> Self {
        Self {
            text: raw.0,
            at: 0,
            checked: true,
        }
    }

    fn bytes(&self) -> &'a [u8] {
        self.text.as_bytes()
    }

    fn peek(&self) -> Option<u8> {
        self.bytes().get(self.at).copied()
    }

    fn skip_whitespace(&mut self) {
        self.at = skip_whitespace(self.bytes(), self.at);
    }

    /// Whether only whitespace is left.
    pub(crate) fn at_end(&mut self) -> bool {
        self.skip_whitespace();
        self.at == self.text.len()
    }

    /// Skips whitespace, then `token` if it comes next.
    pub(crate) fn eat(&mut self, token: &str) -> bool {
        self.skip_whitespace();
        let found = self.bytes()[self.at..].starts_with(token.as_bytes());
        if found {
            self.at += token.len();
        }
        found
    }

    /// The next value's first byte, after whitespace.
    pub(crate) fn next_byte(&mut self) -> Option<u8> {
        self.skip_whitespace();
        self.peek()
    }

    /// Checks the value that comes next and returns its text.
    pub(crate) fn value(&mut self) -> Option<RawJson<'a>> {
        self.skip_whitespace();
        let start = self.at;
        self.at = if self.checked {
            end_of_checked_value(self.bytes(), start)?
        } else {
            skip_value(self.bytes(), start)?
        };
        Some(RawJson(&self.text[start..self.at]))
    }

    /// Walks the object that comes next: `entry` is given each key (without its quotes)
    /// and must read the key's value. A key with escapes ends the walk: it is not decoded
    /// here.
    pub(crate) fn object(
        &mut self,
        mut entry: impl FnMut(&mut Self, &'a str) -> Option<()>,
    ) -> Option<()> {
        if !self.eat("{") {
            return None;
        }
        if self.eat("}") {
            return Some(());
        }
        loop {
            self.skip_whitespace();
            let start = self.at + 1;
            if self.peek() != Some(b'"') {
                return None;
            }
            // A key ends at its first quote; an escape (or a control character) before it
            // ends the walk.
            let end = to_quote_escape_or_control(self.bytes(), start);
            if self.bytes().get(end) != Some(&b'"') {
                return None;
            }
            self.at = end + 1;
            let key = &self.text[start..end];
            if !self.eat(":") {
                return None;
            }
            entry(self, key)?;
            if self.eat(",") {
                continue;
            }
            return self.eat("}").then_some(());
        }
    }

    /// Walks the array that comes next: `element` must read each element.
    pub(crate) fn array(&mut self, mut element: impl FnMut(&mut Self) -> Option<()>) -> Option<()> {
        if !self.eat("[") {
            return None;
        }
        if self.eat("]") {
            return Some(());
        }
        loop {
            element(self)?;
            if self.eat(",") {
                continue;
            }
            return self.eat("]").then_some(());
        }
    }
}

#[inline(always)]
fn skip_whitespace(b: &[u8], mut at: usize) -> usize {
    while matches!(b.get(at), Some(b' ' | b'\n' | b'\r' | b'\t')) {
        at += 1;
    }
    at
}

/// The end of the string that starts at `at` (its opening quote), checked: no control
/// character, every escape one JSON has.
#[inline(always)]
fn skip_string(b: &[u8], mut at: usize) -> Option<usize> {
    at += 1;
    loop {
        at = to_quote_escape_or_control(b, at);
        match b.get(at)? {
            b'"' => return Some(at + 1),
            b'\\' => match b.get(at + 1)? {
                b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => at += 2,
                b'u' => {
                    let hex = b.get(at + 2..at + 6)?;
                    if !hex.iter().all(u8::is_ascii_hexdigit) {
                        return None;
                    }
                    at += 6;
                }
                _ => return None,
            },
            _ => return None,
        }
    }
}

/// The first `"`, `\` or control character at or after `at` (or the end), eight bytes at
/// a time: a byte is flagged where it equals `"` or `\`, or is below 0x20 (each test
/// borrows into the byte's high bit only for a match, and `!word` drops bytes that had it
/// set already).
#[inline(always)]
fn to_quote_escape_or_control(b: &[u8], mut at: usize) -> usize {
    const ONES: u64 = u64::MAX / 255;
    const HIGH: u64 = ONES * 0x80;
    while let Some(chunk) = b.get(at..at + 8) {
        let word = u64::from_le_bytes(chunk.try_into().expect("eight bytes"));
        let quote = word ^ (ONES * u64::from(b'"'));
        let escape = word ^ (ONES * u64::from(b'\\'));
        let found = (quote.wrapping_sub(ONES) & !quote)
            | (escape.wrapping_sub(ONES) & !escape)
            | (word.wrapping_sub(ONES * 0x20) & !word);
        let found = found & HIGH;
        if found != 0 {
            return at + (found.trailing_zeros() / 8) as usize;
        }
        at += 8;
    }
    while matches!(b.get(at), Some(&c) if c != b'"' && c != b'\\' && c >= 0x20) {
        at += 1;
    }
    at
}

#[inline(always)]
fn skip_digits(b: &[u8], mut at: usize) -> usize {
    while matches!(b.get(at), Some(b'0'..=b'9')) {
        at += 1;
    }
    at
}

/// The end of the number that starts at `at`, checked against JSON's grammar.
#[inline(always)]
fn skip_number(b: &[u8], mut at: usize) -> Option<usize> {
    if b.get(at) == Some(&b'-') {
        at += 1;
    }
    match b.get(at)? {
        b'0' => at += 1,
        b'1'..=b'9' => at = skip_digits(b, at + 1),
        _ => return None,
    }
    if b.get(at) == Some(&b'.') {
        let end = skip_digits(b, at + 1);
        if end == at + 1 {
            return None;
        }
        at = end;
    }
    if matches!(b.get(at), Some(b'e' | b'E')) {
        at += 1;
        if matches!(b.get(at), Some(b'+' | b'-')) {
            at += 1;
        }
        let end = skip_digits(b, at);
        if end == at {
            return None;
        }
        at = end;
    }
    Some(at)
}

/// The objects and arrays open around a position, innermost last: a bit each (set for an
/// object), 64 to a word, so a value nested less than 64 deep (every event Rasa writes)
/// allocates nothing.
struct Open {
    top: u64,
    depth: usize,
    below: Vec<u64>,
}

impl Open {
    #[inline(always)]
    fn push(&mut self, object: bool) {
        if self.depth > 0 && self.depth % 64 == 0 {
            self.below.push(self.top);
            self.top = 0;
        }
        self.top = (self.top << 1) | u64::from(object);
        self.depth += 1;
    }

    #[inline(always)]
    fn pop(&mut self) {
        self.depth -= 1;
        if self.depth > 0 && self.depth % 64 == 0 {
            self.top = self.below.pop().unwrap_or_default();
        } else {
            self.top >>= 1;
        }
    }

    /// Whether the innermost is an object; `None` when nothing is open.
    #[inline(always)]
    fn innermost_is_object(&self) -> Option<bool> {
        (self.depth > 0).then_some(self.top & 1 == 1)
    }
}

/// The end of the value that starts at `at` (no whitespace before it), checked. Objects and
/// arrays are walked with a stack of their own, not by recursion, so depth costs a bit
/// per level and never the thread's stack (serde_json does the same when it skips).
fn skip_value(b: &[u8], mut at: usize) -> Option<usize> {
    let mut open = Open {
        top: 0,
        depth: 0,
        below: Vec::new(),
    };
    'value: loop {
        at = skip_whitespace(b, at);
        match b.get(at)? {
            b'{' => {
                at = skip_whitespace(b, at + 1);
                if b.get(at) == Some(&b'}') {
                    at += 1;
                } else {
                    open.push(true);
                    at = key(b, at)?;
                    continue 'value;
                }
            }
            b'[' => {
                at = skip_whitespace(b, at + 1);
                if b.get(at) == Some(&b']') {
                    at += 1;
                } else {
                    open.push(false);
                    continue 'value;
                }
            }
            b'"' => at = skip_string(b, at)?,
            b'-' | b'0'..=b'9' => at = skip_number(b, at)?,
            b't' if b[at..].starts_with(b"true") => at += 4,
            b'f' if b[at..].starts_with(b"false") => at += 5,
            b'n' if b[at..].starts_with(b"null") => at += 4,
            _ => return None,
        }
        // After a value: close what ends here, up to the next value.
        loop {
            let Some(object) = open.innermost_is_object() else {
                return Some(at);
            };
            at = skip_whitespace(b, at);
            match (b.get(at)?, object) {
                (b',', true) => {
                    at = key(b, skip_whitespace(b, at + 1))?;
                    continue 'value;
                }
                (b',', false) => {
                    at += 1;
                    continue 'value;
                }
                (b'}', true) | (b']', false) => {
                    open.pop();
                    at += 1;
                }
                _ => return None,
            }
        }
    }
}

/// The end of the value that starts at `at` in text already checked to be JSON (so every
/// string closes, every bracket is matched): strings are stepped over to their closing
/// quote and brackets counted, nothing else is looked at. `None` only for text that was
/// not checked after all.
fn end_of_checked_value(b: &[u8], mut at: usize) -> Option<usize> {
    let mut depth = 0usize;
    loop {
        match *b.get(at)? {
            b'"' => {
                at += 1;
                loop {
                    at = to_quote_escape_or_control(b, at);
                    match *b.get(at)? {
                        b'"' => break,
                        b'\\' => at += 2,
                        _ => return None,
                    }
                }
                at += 1;
                if depth == 0 {
                    return Some(at);
                }
            }
            b'{' | b'[' => {
                depth += 1;
                at += 1;
            }
            b'}' | b']' => {
                depth = depth.checked_sub(1)?;
                at += 1;
                if depth == 0 {
                    return Some(at);
                }
            }
            // A number or a literal on its own: to the byte that ends it.
            _ if depth == 0 => {
                while !matches!(
                    b.get(at),
                    None | Some(b',' | b'}' | b']' | b' ' | b'\n' | b'\r' | b'\t')
                ) {
                    at += 1;
                }
                return Some(at);
            }
            _ => at += 1,
        }
    }
}

/// A key at `at` and the colon after it: where its value starts.
#[inline(always)]
fn key(b: &[u8], at: usize) -> Option<usize> {
    if b.get(at) != Some(&b'"') {
        return None;
    }
    let at = skip_whitespace(b, skip_string(b, at)?);
    (b.get(at) == Some(&b':')).then_some(at + 1)
}

/// Every text that differs from `text` by one byte: each byte dropped, and each replaced by
/// each of `changes`; with what was changed, for a failing assertion to say.
#[cfg(test)]
pub(crate) fn one_byte_changes<'t>(
    text: &'t [u8],
    changes: &'t [u8],
) -> impl Iterator<Item = (Vec<u8>, String)> + 't {
    (0..text.len()).flat_map(move |at| {
        let mut dropped = text.to_vec();
        dropped.remove(at);
        std::iter::once((dropped, format!("byte {at} dropped"))).chain(changes.iter().map(
            move |&c| {
                let mut changed = text.to_vec();
                changed[at] = c;
                (changed, format!("byte {at} as {c:#04x}"))
            },
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::de::IgnoredAny;

    /// Whether the walk accepts `text` as one value (surrounded by whitespace at most).
    fn walk_accepts(text: &str) -> bool {
        let mut scan = Scan::new(text);
        scan.value().is_some() && scan.at_end()
    }

    fn serde_accepts(text: &str) -> bool {
        serde_json::from_str::<IgnoredAny>(text).is_ok()
    }

    #[test]
    fn it_accepts_and_refuses_what_serde_json_does() {
        let cases = [
            "0",
            "-0",
            "01",
            "-",
            "1.",
            "1.5",
            ".5",
            "1e5",
            "1E+5",
            "1e-05",
            "1e",
            "1e+",
            "-01",
            "2.5e3.1",
            "true",
            "tru",
            "false",
            "null",
            "nul",
            "nulll",
            r#""""#,
            r#""a"#,
            r#""\u00e9""#,
            r#""\u00g9""#,
            r#""\ud800""#,
            r#""\x""#,
            "\"a\tb\"",
            "\"a\u{7f}b\"",
            "\"é ☃ 𝄞\"",
            "[]",
            "[1,]",
            "[,1]",
            "[1 2]",
            "[1,2]",
            " [ 1 , [ ] ] ",
            "{}",
            r#"{"a":1}"#,
            r#"{"a":1,}"#,
            r#"{"a" 1}"#,
            r#"{a:1}"#,
            r#"{"a":}"#,
            r#"{1:1}"#,
            r#"{"a":1 "b":2}"#,
            r#"{"a":[{"b":{}}]}"#,
            "[}",
            "{]",
            "[[]",
            "[]]",
            "",
            " ",
            "1 2",
            "\u{feff}1",
            "NaN",
            "Infinity",
            "-Infinity",
            "[1,\n2\r,\t3]",
            "[1\u{a0}]",
            r#""\/\b\f\n\r\t\"\\""#,
            "\"\u{0}\"",
            "\"\u{1f}\"",
            "\"\u{20}\"",
        ];
        for text in cases {
            assert_eq!(walk_accepts(text), serde_accepts(text), "{text:?}");
        }
        let deep = "[".repeat(10_000) + &"]".repeat(10_000);
        assert!(
            walk_accepts(&deep),
            "skipping has no depth limit, as serde_json's"
        );
        assert!(serde_json::from_str::<&RawValue>(&deep).is_ok());
        assert!(!walk_accepts(&"[".repeat(10_000)));
        // Objects and arrays in turn, 1,000 deep: every level's kind is kept across the
        // stack's words, so each level must be closed by its own bracket.
        let objects: Vec<bool> = (0..1_000).map(|i| i % 3 == 1).collect();
        let nested = |swapped: Option<usize>| {
            let mut text: String = objects
                .iter()
                .map(|&object| if object { "{\"k\": " } else { "[" })
                .collect();
            text.push('0');
            for (level, &object) in objects.iter().enumerate().rev() {
                let close = object != (swapped == Some(level));
                text.push(if close { '}' } else { ']' });
            }
            text
        };
        assert!(walk_accepts(&nested(None)));
        for level in [0, 1, 62, 63, 64, 65, 127, 128, 500, 999] {
            let text = nested(Some(level));
            assert!(!walk_accepts(&text) && !serde_accepts(&text), "{level}");
        }
    }

    /// On text already checked, stepping over a value by its quotes and brackets ends
    /// where checking it does: every value the checking walk accepts here, alone and as
    /// the values of an object walked from a [`RawJson`].
    #[test]
    fn a_checked_value_ends_where_checking_it_ends() {
        let mut values: Vec<String> = [
            "0",
            "-0.5e+3",
            "true",
            "false",
            "null",
            r#""""#,
            r#""a\"b\\""#,
            r#""\u00e9 é""#,
            "[]",
            "{}",
            "[1, [2, {\"a\": [\"]\", \"}\"]}], 3]",
            r#"{"k": {"l": [true, null, "x\\"], "m": -1}}"#,
            " [ 1 , [ ] ] ",
        ]
        .iter()
        .map(|v| v.to_string())
        .collect();
        values.push(TRACKER.to_owned());
        values.push("[".repeat(200) + &"]".repeat(200));
        for value in &values {
            assert!(walk_accepts(value), "{value}");
            let raw: RawJson = serde_json::from_str(value).unwrap();
            let mut checking = Scan::new(raw.get());
            let mut checked = Scan::checked(raw);
            assert_eq!(checked.value(), checking.value(), "{value}");
            assert!(checked.at_end(), "{value}");
            // The same value twice inside an object, each read back by its key, then a key
            // with an escape, which ends the walk, checked or not.
            let object = format!(r#"{{"a": {value}, "c": {value}, "b\u0062": 1}}"#);
            let raw: RawJson = serde_json::from_str(&object).unwrap();
            let mut read = Vec::new();
            let escaped_key = Scan::checked(raw).object(|scan, key| {
                read.push((key, scan.value()?.get()));
                Some(())
            });
            assert_eq!(escaped_key, None);
            assert_eq!(read, [("a", value.trim()), ("c", value.trim())]);
        }
    }

    const TRACKER: &str = r#"{"sender_id": "c-1", "slots": {"n": 2.5e-3, "ok": true, "x": null},
 "events": [{"event": "action", "timestamp": 1733.25, "name": "action_listen"},
  {"event": "user", "timestamp": 1734, "text": "stop \"it\" \u00e9", "parse_data":
   {"intent": {"name": "affirm", "confidence": 0.98}, "entities": [], "intent_ranking":
   [{"name": "affirm", "confidence": 0.98}, {"name": "deny", "confidence": -1E+2}]}}],
 "latest_message": {"text": "ja"}, "paused": false}"#;

    /// Every string of up to four bytes from JSON's alphabet, and mutations of a tracker
    /// at every position: the walk and serde_json agree on each.
    #[test]
    fn it_agrees_with_serde_json_on_short_texts_and_on_every_mutation_of_a_tracker() {
        let alphabet: Vec<u8> = br#"{}[]:,"\ 0123-.eE+tfnrulsab"#.to_vec();
        let mut text = Vec::new();
        for len in 1..=4usize {
            let mut digits = vec![0usize; len];
            loop {
                text.clear();
                text.extend(digits.iter().map(|&d| alphabet[d]));
                let s = std::str::from_utf8(&text).unwrap();
                assert_eq!(walk_accepts(s), serde_accepts(s), "{s:?}");
                let Some(i) = digits.iter().position(|&d| d + 1 < alphabet.len()) else {
                    break;
                };
                digits[i] += 1;
                digits[..i].iter_mut().for_each(|d| *d = 0);
            }
        }
        let changes = [b'"', b'\\', b',', b'}', b']', b'0', b'\n', 0x01];
        let mut checked = 0;
        for (text, what) in one_byte_changes(TRACKER.as_bytes(), &changes) {
            let Ok(s) = std::str::from_utf8(&text) else {
                continue;
            };
            assert_eq!(walk_accepts(s), serde_accepts(s), "{what}");
            checked += 1;
        }
        assert!(checked > TRACKER.len() * 8);
    }

    #[test]
    fn a_raw_part_is_the_value_without_the_whitespace_around_it() {
        let mut scan = Scan::new(" { \"a\" : [ 1 , 2 ] , \"b\":\"x\" } ");
        let mut seen = Vec::new();
        scan.object(|scan, key| {
            seen.push((key, scan.value()?.get()));
            Some(())
        })
        .unwrap();
        assert!(scan.at_end());
        assert_eq!(seen, [("a", "[ 1 , 2 ]"), ("b", "\"x\"")]);
        let raw: &RawValue = serde_json::from_str(" [ 1 , 2 ] ").unwrap();
        assert_eq!(raw.get(), "[ 1 , 2 ]");
        // An escaped key is left to serde_json.
        assert!(Scan::new(r#"{"a\u0062": 1}"#)
            .object(|s, _| s.value().map(drop))
            .is_none());
    }
}
