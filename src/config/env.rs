//! `${VAR}` in endpoints.yml, replaced as Rasa 3.x replaces it (CONTRACT.md section 0):
//! in plain scalars only (keys and values; never in quoted or block scalars, nor behind an
//! explicit tag) that hold a `${…}`; there every `$NAME` and `${NAME}` of a set variable
//! takes its value, as Python's `os.path.expandvars` does, and a word left starting with
//! `$` that was in the text (an unset variable) is an error naming it.

use std::borrow::Cow;

use saphyr_parser::{Event, Parser, ScalarStyle};

/// Why a file's variables could not be replaced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unset {
    /// Where: the dotted key path of the scalar (`action_endpoint.token`), or `-`.
    pub key: String,
    pub line: usize,
    /// The words Rasa would name (`${ACTION_TOKEN}`); empty when the file could not be
    /// read to find its variables (`reason` says why).
    pub words: Vec<String>,
    pub reason: Option<String>,
}

impl std::fmt::Display for Unset {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.reason {
            Some(reason) => write!(
                f,
                "line {}: its variables could not be replaced: {reason}",
                self.line
            ),
            None => write!(
                f,
                "line {}: {} not set in the environment (Rasa refuses this file too)",
                self.line,
                self.words.join(", ")
            ),
        }
    }
}

/// Where the parser is, to name the key of a scalar.
enum Frame {
    Mapping { key: Option<String>, at_key: bool },
    Sequence { index: usize },
}

/// The text with its variables replaced, or the text itself when it has none. A text
/// with a `${` that the event parser cannot read is refused: its variables would stay
/// literal (a secret among them) if another reader took it.
pub fn substitute<'a>(
    text: &'a str,
    var: &dyn Fn(&str) -> Option<String>,
) -> Result<Cow<'a, str>, Unset> {
    if !text.contains("${") {
        return Ok(Cow::Borrowed(text));
    }
    // Spans count characters; replacements are made on bytes.
    let bytes_at: Vec<usize> = text
        .char_indices()
        .map(|(i, _)| i)
        .chain([text.len()])
        .collect();
    let mut replacements: Vec<(usize, usize, String)> = Vec::new();
    let mut frames: Vec<Frame> = Vec::new();
    for event in Parser::new_from_str(text) {
        let (event, span) = match event {
            Ok(event) => event,
            Err(e) => {
                return Err(Unset {
                    key: "-".into(),
                    line: e.marker().line(),
                    words: Vec::new(),
                    reason: Some(e.info().to_owned()),
                })
            }
        };
        match event {
            Event::MappingStart(..) => frames.push(Frame::Mapping {
                key: None,
                at_key: true,
            }),
            Event::SequenceStart(..) => frames.push(Frame::Sequence { index: 0 }),
            Event::MappingEnd | Event::SequenceEnd => {
                frames.pop();
                note_value(&mut frames);
            }
            Event::Alias(_) => note_value(&mut frames),
            Event::Scalar(value, style, _, tag) => {
                let is_key = matches!(frames.last(), Some(Frame::Mapping { at_key: true, .. }));
                if style == ScalarStyle::Plain && tag.is_none() && holds_variable(&value) {
                    let expanded = expand(&value, var);
                    let words: Vec<String> = expanded
                        .split_whitespace()
                        .filter(|w| w.starts_with('$') && value.contains(*w))
                        .map(str::to_owned)
                        .collect();
                    if !words.is_empty() {
                        let mut key = path(&frames, is_key);
                        if is_key {
                            key = if key.is_empty() {
                                value.to_string()
                            } else {
                                format!("{key}.{value}")
                            };
                        }
                        return Err(Unset {
                            key: if key.is_empty() { "-".into() } else { key },
                            line: span.start.line(),
                            words,
                            reason: None,
                        });
                    }
                    let (start, end) = (span.start.index(), span.end.index());
                    if let (Some(&from), Some(&to)) = (bytes_at.get(start), bytes_at.get(end)) {
                        // The span starts at the node's anchor (`&name`), which stays.
                        let from = from + anchor_len(&text[from..to]);
                        // Ours may take numbers and booleans from the environment; Rasa's
                        // sections get text, as Rasa does.
                        let ours = matches!(frames.first(), Some(Frame::Mapping { key: Some(k), .. }) if k == "actiongate")
                            && frames.len() > 1;
                        replacements.push((from, to, render(&expanded, ours)));
                    }
                }
                if is_key {
                    if let Some(Frame::Mapping { key, at_key }) = frames.last_mut() {
                        *key = Some(value.to_string());
                        *at_key = false;
                    }
                } else {
                    note_value(&mut frames);
                }
            }
            _ => {}
        }
    }
    if replacements.is_empty() {
        return Ok(Cow::Borrowed(text));
    }
    let mut out = String::with_capacity(text.len());
    let mut at = 0;
    for (from, to, with) in replacements {
        out.push_str(&text[at..from]);
        out.push_str(&with);
        at = to;
    }
    out.push_str(&text[at..]);
    Ok(Cow::Owned(out))
}

/// The bytes of a leading anchor (`&name` and the blanks after it).
fn anchor_len(node: &str) -> usize {
    if !node.starts_with('&') {
        return 0;
    }
    let name = node.find([' ', '\t', '\n', '\r']).unwrap_or(node.len());
    let blanks = node[name..]
        .bytes()
        .take_while(|b| matches!(b, b' ' | b'\t' | b'\n' | b'\r'))
        .count();
    name + blanks
}

/// A value (not a key) ended in the innermost collection.
fn note_value(frames: &mut [Frame]) {
    match frames.last_mut() {
        Some(Frame::Mapping { at_key, .. }) => *at_key = true,
        Some(Frame::Sequence { index }) => *index += 1,
        None => {}
    }
}

/// The dotted path of the value the parser is at; of the mapping itself, for a key.
fn path(frames: &[Frame], at_key: bool) -> String {
    let mut parts = Vec::new();
    for (i, frame) in frames.iter().enumerate() {
        let last = i + 1 == frames.len();
        match frame {
            Frame::Mapping { key: Some(k), .. } if !(last && at_key) => parts.push(k.clone()),
            Frame::Sequence { index } => parts.push(index.to_string()),
            _ => {}
        }
    }
    parts.join(".")
}

/// Rasa's resolver, `^(.*)\$\{(.*)\}(.*)$`: a `${` and, after it, a `}`, on one line.
fn holds_variable(value: &str) -> bool {
    if value.contains('\n') {
        return false;
    }
    match value.find("${") {
        Some(i) => value[i + 2..].contains('}'),
        None => false,
    }
}

/// Python's `os.path.expandvars`: `$NAME` (ASCII letters, digits, `_`) and `${ANYTHING}`
/// take the variable's value when it is set, and stay as written when it is not.
fn expand(value: &str, var: &dyn Fn(&str) -> Option<String>) -> String {
    let mut out = String::with_capacity(value.len());
    let mut rest = value;
    while let Some(dollar) = rest.find('$') {
        out.push_str(&rest[..dollar]);
        let after = &rest[dollar + 1..];
        let (name, len) = if let Some(braced) = after.strip_prefix('{') {
            match braced.find('}') {
                Some(close) => (Some(&braced[..close]), close + 2),
                None => (None, 0),
            }
        } else {
            let n = after
                .bytes()
                .take_while(|b| b.is_ascii_alphanumeric() || *b == b'_')
                .count();
            if n > 0 {
                (Some(&after[..n]), n)
            } else {
                (None, 0)
            }
        };
        match name.and_then(var) {
            Some(found) => {
                out.push_str(&found);
                rest = &after[len..];
            }
            None => {
                // As written; the scan goes on after the `$` or the whole `${…}`.
                out.push_str(&rest[dollar..dollar + 1 + len]);
                rest = &after[len..];
            }
        }
    }
    out.push_str(rest);
    out
}

/// A replaced scalar as YAML text: double-quoted (so no value can change the file's
/// structure, and Rasa's sections read exactly the text Rasa reads), except, under
/// `actiongate:` (`ours`), a number or `true`/`false`, plain, so numeric and boolean
/// settings can come from the environment (text settings still read them as text).
fn render(expanded: &str, ours: bool) -> String {
    let numeric = !expanded.is_empty()
        && expanded
            .trim_start_matches(['-', '+'])
            .split_once('.')
            .map_or_else(
                || is_digits(expanded.trim_start_matches(['-', '+'])),
                |(whole, fraction)| (whole.is_empty() || is_digits(whole)) && is_digits(fraction),
            )
        && expanded.len() <= 40;
    if ours && (numeric || expanded == "true" || expanded == "false") {
        return expanded.to_owned();
    }
    // JSON's escapes are YAML's; the characters YAML would read as breaks or refuses
    // (NEL, the line and paragraph separators, DEL, C1 controls, a BOM) escaped too.
    let mut quoted = String::with_capacity(expanded.len() + 2);
    for c in serde_json::to_string(expanded)
        .expect("a string serialises")
        .chars()
    {
        match c {
            '\u{7f}'..='\u{9f}' | '\u{2028}' | '\u{2029}' | '\u{feff}' => {
                quoted.push_str(&format!("\\u{:04x}", c as u32));
            }
            c => quoted.push(c),
        }
    }
    quoted
}

fn is_digits(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(name: &str) -> Option<String> {
        match name {
            "A" => Some("alpha".into()),
            "B" => Some("beta".into()),
            "EMPTY" => Some(String::new()),
            "DOLLAR" => Some("x$y".into()),
            "SP" => Some("has space: and # more".into()),
            "PORT" => Some("5055".into()),
            "QUOTE" => Some("a\"b\\c".into()),
            _ => None,
        }
    }

    fn value_of(yaml: &str) -> Result<serde_yaml_ng::Value, Unset> {
        let text = substitute(yaml, &env)?;
        Ok(serde_yaml_ng::from_str(&text).unwrap())
    }

    fn k(yaml: &str) -> serde_yaml_ng::Value {
        value_of(yaml).unwrap()["k"].clone()
    }

    /// Each case as Rasa 3.6.21 reads it (its own loader, run on the same text).
    #[test]
    fn variables_are_replaced_where_rasa_replaces_them() {
        assert_eq!(k("k: ${A}"), "alpha");
        assert_eq!(k("k: \"${A}\""), "${A}");
        assert_eq!(k("k: '${A}'"), "${A}");
        assert_eq!(k("k: pre-${A}-post"), "pre-alpha-post");
        assert_eq!(k("k: ${A}${B}"), "alphabeta");
        assert_eq!(k("k: ${A} and ${B}"), "alpha and beta");
        assert_eq!(k("k: $A"), "$A");
        assert_eq!(k("k: ${A} $B"), "alpha beta");
        assert_eq!(k("k: $UNSET"), "$UNSET");
        assert_eq!(k("k: ${EMPTY}"), "");
        assert_eq!(k("k: ${DOLLAR}"), "x$y");
        assert_eq!(k("k: |\n  ${A}\n"), "${A}\n");
        assert_eq!(k("k: ${A"), "${A");
        assert_eq!(k("k: 5${A}"), "5alpha");
        assert_eq!(k("k: ${SP}"), "has space: and # more");
        assert_eq!(k("k: ${QUOTE}"), "a\"b\\c");
        assert_eq!(k("k: ${A}\n  more"), "alpha more");
        assert_eq!(k("k: !!str ${A}"), "${A}");
        assert_eq!(k("k: $${A}"), "$alpha");
        assert_eq!(k("k: ~${A}"), "~alpha");
        assert_eq!(k("k: ${A}#c"), "alpha#c");
        assert_eq!(k("k: ${A} #c"), "alpha");
        assert_eq!(k("k: pre-${UNSET}"), "pre-${UNSET}");
        assert_eq!(value_of("${A}: v").unwrap()["alpha"], "v");
        assert_eq!(
            value_of("k:\n  - ${A}\n  - \"${B}\"\n").unwrap()["k"][0],
            "alpha"
        );
        assert_eq!(
            value_of("k:\n  - ${A}\n  - \"${B}\"\n").unwrap()["k"][1],
            "${B}"
        );
        // Numbers stay numbers for our settings that take them, and text in Rasa's
        // sections, as Rasa reads them; é and emoji keep their place.
        assert_eq!(k("k: ${PORT}"), "5055");
        assert_eq!(
            value_of("actiongate:\n  k: ${PORT}\n").unwrap()["actiongate"]["k"],
            5055
        );
        // An anchor stays with its node.
        let anchored = value_of("k: &t ${A}\nj: *t\n").unwrap();
        assert_eq!(
            (anchored["k"].clone(), anchored["j"].clone()),
            ("alpha".into(), "alpha".into())
        );
        assert_eq!(value_of("é: 😀\nk: ${A}\n").unwrap()["k"], "alpha");
    }

    #[test]
    fn an_unset_variable_is_an_error_naming_it_and_its_key() {
        let err =
            value_of("action_endpoint:\n  url: http://x\n  token: ${ACTION_TOKEN}\n").unwrap_err();
        assert_eq!(err.key, "action_endpoint.token");
        assert_eq!(err.words, vec!["${ACTION_TOKEN}".to_owned()]);
        assert_eq!(err.line, 3);
        for text in [
            "k: ${UNSET}",
            "k: x ${UNSET} y",
            "k: ${}",
            "k: ${UNSET:-d}",
            "k: ${A} $UNSET",
        ] {
            assert!(value_of(text).is_err(), "{text}");
        }
        let err = value_of("a:\n  - b: 1\n  - c: ${UNSET}\n").unwrap_err();
        assert_eq!(err.key, "a.1.c");
    }

    #[test]
    fn a_file_with_a_variable_that_cannot_be_read_is_refused() {
        let err = substitute("k: ${A}\n  - broken: [\n", &env).unwrap_err();
        assert!(err.reason.is_some(), "{err}");
    }

    #[test]
    fn a_file_without_variables_is_returned_as_it_is() {
        let text = "action_endpoint:\n  url: http://x  # ${not a variable in a comment\n";
        assert!(matches!(substitute(text, &env), Ok(Cow::Borrowed(_))));
    }
}
