//! The question as the customer read it (CONTRACT.md section 3): the confirmation
//! response's text variations rendered as Rasa 3.6 renders templates, and a tag found only
//! as a whole.

use std::collections::HashMap;

use serde_json::Value;

/// The text variations of `response` in a Rasa domain, or `None` when the domain does not
/// carry that response (or none of its variations has a text).
pub fn variations(domain: &Value, response: &str) -> Option<Vec<String>> {
    let texts: Vec<String> = domain
        .get("responses")?
        .get(response)?
        .as_array()?
        .iter()
        .filter_map(|v| v.get("text").and_then(Value::as_str))
        .map(str::to_owned)
        .collect();
    (!texts.is_empty()).then_some(texts)
}

/// The `{name}` placeholders of a template, as Rasa finds them (`{([^\n{}]+?)}`).
pub fn placeholders(template: &str) -> Vec<&str> {
    let mut names = Vec::new();
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        let after = &rest[open + 1..];
        match after.find(['{', '}', '\n']) {
            Some(end) if end > 0 && after.as_bytes()[end] == b'}' => {
                names.push(&after[..end]);
                rest = &after[end + 1..];
            }
            // An empty `{}`, a newline, or another `{` first: the scan moves on by one.
            _ => rest = after,
        }
    }
    names
}

/// Renders a template as Rasa 3.6's `interpolate_text` does: each `{name}` is replaced by
/// `str()` of the value; `{{` and `}}` are escaped braces; a name without a value makes
/// Rasa send the template unrendered. `None` when the result can't be known for certain
/// (a value Python would print in a way this does not reproduce, a stray brace), which
/// the caller treats as "the question is not this variation".
pub fn render(template: &str, values: &HashMap<String, Value>) -> Option<String> {
    // Step 1 of Rasa's renderer: `{name}` becomes `{0[name]}`; step 2 is str.format.
    let mut out = String::with_capacity(template.len() + 64);
    let mut missing = false;
    let mut leftover_field = false;
    let mut rest = template;
    while let Some(at) = rest.find(['{', '}']) {
        out.push_str(&rest[..at]);
        let tail = &rest[at..];
        if let Some(after) = tail.strip_prefix("{{") {
            // `{{name}}`: the inner `{name}` is still a placeholder to Rasa's regex, and the
            // escaped result keeps a literal `0[`, which makes Rasa fall back (below).
            if let Some(inner) = placeholder_at(after) {
                if after[inner + 1..].starts_with('}') {
                    leftover_field = true;
                }
            }
            out.push('{');
            rest = after;
        } else if let Some(after) = tail.strip_prefix("}}") {
            out.push('}');
            rest = after;
        } else if tail.starts_with('}') {
            return None; // Python: "Single '}' encountered in format string".
        } else {
            let after = &tail[1..];
            let end = placeholder_at(after)?;
            let name = &after[..end];
            // Python reads an all-digit index as an integer, which no slot name is; and
            // `:`, `!`, `[`, `]` would change what str.format parses.
            if name.bytes().all(|b| b.is_ascii_digit()) {
                missing = true;
            } else if name.contains([':', '!', '[', ']']) {
                return None;
            } else {
                match values.get(name) {
                    Some(value) => out.push_str(&python_str(value)?),
                    None => missing = true,
                }
            }
            rest = &after[end + 1..];
        }
    }
    out.push_str(rest);
    if missing {
        return Some(template.to_owned());
    }
    if leftover_field || out.contains("0[") {
        // Rasa then returns `template.format({})`: escapes undone, and any real field makes
        // it give up and send the template as it is.
        return format_without_values(template);
    }
    Some(out)
}

/// `template.format({})` in Python: escapes undone; a field raises the `KeyError` after
/// which Rasa sends the template as it is; a stray brace, an error this can't follow.
fn format_without_values(template: &str) -> Option<String> {
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    while let Some(at) = rest.find(['{', '}']) {
        out.push_str(&rest[..at]);
        let tail = &rest[at..];
        if let Some(after) = tail.strip_prefix("{{") {
            out.push('{');
            rest = after;
        } else if let Some(after) = tail.strip_prefix("}}") {
            out.push('}');
            rest = after;
        } else if tail.starts_with('{') && tail.contains('}') {
            return Some(template.to_owned());
        } else {
            return None;
        }
    }
    out.push_str(rest);
    Some(out)
}

/// The length of the placeholder name at the start of `after` (just past a `{`), when a
/// `}` closes it before any `{` or newline.
fn placeholder_at(after: &str) -> Option<usize> {
    let end = after.find(['{', '}', '\n'])?;
    (end > 0 && after.as_bytes()[end] == b'}').then_some(end)
}

/// `str(value)` in Python, for the values a slot holds; `None` where this can't be sure.
/// The slot values as given, and, when some are whole numbers, with every whole number
/// read as an integer and as a float. Over gRPC a number is a double (Rasa's 12 and 12.0
/// both arrive as 12.0), and a Rasa slot type does not say which Python held ("12" and
/// "12.0" are both renderings of a float slot), so either reading may be what Rasa
/// rendered; the number is the same in both.
pub fn whole_number_readings(
    values: &HashMap<String, Value>,
) -> impl Iterator<Item = std::borrow::Cow<'_, HashMap<String, Value>>> {
    let whole = |v: &Value| {
        v.as_f64()
            .is_some_and(|f| f.fract() == 0.0 && f.abs() < 1e15)
    };
    let any_whole = values.values().any(|v| v.is_number() && whole(v));
    let reading = move |as_float: bool| {
        let read: HashMap<String, Value> = values
            .iter()
            .map(|(k, v)| {
                let v = match v.as_f64() {
                    Some(f) if v.is_number() && whole(v) => {
                        if as_float {
                            serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)
                        } else {
                            Value::from(f as i64)
                        }
                    }
                    _ => v.clone(),
                };
                (k.clone(), v)
            })
            .collect();
        std::borrow::Cow::Owned(read)
    };
    std::iter::once(std::borrow::Cow::Borrowed(values)).chain(
        any_whole
            .then(|| [reading(false), reading(true)])
            .into_iter()
            .flatten(),
    )
}

fn python_str(value: &Value) -> Option<String> {
    match value {
        Value::String(s) => Some(s.clone()),
        Value::Null => Some("None".to_owned()),
        Value::Bool(true) => Some("True".to_owned()),
        Value::Bool(false) => Some("False".to_owned()),
        Value::Number(n) if n.is_i64() || n.is_u64() => Some(n.to_string()),
        Value::Number(n) => {
            // Python's repr of a float: the shortest round trip, like Rust's, with ".0" on
            // whole numbers; exponents (below 1e-4, from 1e16) are left out.
            let f = n.as_f64()?;
            let magnitude = f.abs();
            if !(f == 0.0 || (1e-4..1e16).contains(&magnitude)) {
                return None;
            }
            let text = f.to_string();
            Some(if text.contains('.') {
                text
            } else {
                format!("{text}.0")
            })
        }
        Value::Array(_) | Value::Object(_) => None,
    }
}

/// Whether `text` contains `tag` as a whole: not as part of a longer id before it
/// (`GIFTBOX-7 ...` does not contain `BOX-7 ...`) nor a longer revision after it (`r12`
/// does not contain `r1`). A sentence's full stop may follow it.
pub fn contains_whole(text: &str, tag: &str) -> bool {
    if tag.is_empty() {
        return false;
    }
    let continues_id = |c: char| c.is_alphanumeric() || matches!(c, '-' | '_' | '.' | '/' | ':');
    text.match_indices(tag).any(|(at, _)| {
        let before = text[..at].chars().next_back();
        let mut after = text[at + tag.len()..].chars();
        let next = after.next();
        let clean_start = before.is_none_or(|c| !continues_id(c));
        let clean_end = match next {
            None => true,
            Some('.') => after.next().is_none_or(|c| !c.is_alphanumeric()),
            Some(c) => !(c.is_alphanumeric() || matches!(c, '-' | '_')),
        };
        clean_start && clean_end
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn values(pairs: &[(&str, Value)]) -> HashMap<String, Value> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), v.clone()))
            .collect()
    }

    #[test]
    fn templates_render_as_rasa_renders_them() {
        let v = values(&[
            ("a", json!("x")),
            ("n", json!(null)),
            ("b", json!(true)),
            ("i", json!(12)),
            ("f", json!(12.0)),
            ("g", json!(0.5)),
        ]);
        assert_eq!(
            render("{a} {n} {b} {i} {f} {g}", &v).unwrap(),
            "x None True 12 12.0 0.5"
        );
        // A missing value: Rasa sends the template as it is.
        assert_eq!(render("{a} and {zzz}", &v).unwrap(), "{a} and {zzz}");
        // Escaped braces.
        assert_eq!(render("{{literal}}", &v).unwrap(), "{literal}");
        assert_eq!(render("{{a}} {a}", &v).unwrap(), "{{a}} {a}");
        assert_eq!(render("}} {a} {{", &v).unwrap(), "} x {");
        // Not placeholders to Rasa's regex, and a stray brace Python refuses.
        assert_eq!(render("{}", &v), None);
        assert_eq!(render("a } b", &v), None);
        assert_eq!(render("{5}", &v).unwrap(), "{5}");
        assert_eq!(render("{a:>3}", &v), None);
        assert_eq!(render("no fields", &v).unwrap(), "no fields");
        assert_eq!(render("{x", &v), None);
        assert_eq!(
            render("{l}", &values(&[("l", json!(["a"]))])),
            None,
            "lists: Python's repr is not reproduced"
        );
    }

    #[test]
    fn placeholders_are_found_as_rasa_finds_them() {
        assert_eq!(
            placeholders("{a} {{b}} {c\n} {} {d{e}"),
            vec!["a", "b", "e"]
        );
    }

    #[test]
    fn a_tag_counts_only_as_a_whole() {
        let tag = "BOX-7 stop_renewal r1";
        assert!(contains_whole("(Change BOX-7 stop_renewal r1.)", tag));
        assert!(contains_whole("BOX-7 stop_renewal r1", tag));
        assert!(!contains_whole("(Change GIFTBOX-7 stop_renewal r1.)", tag));
        assert!(!contains_whole("(Change X-BOX-7 stop_renewal r1.)", tag));
        assert!(!contains_whole("(Change BOX-7 stop_renewal r12.)", tag));
        assert!(!contains_whole("(Change BOX-7 stop_renewal r1.5)", tag));
        assert!(!contains_whole("(Change BOX-7 stop_renewal r1_x)", tag));
        // A later whole occurrence still counts.
        assert!(contains_whole(
            "GIFTBOX-7 stop_renewal r1 or BOX-7 stop_renewal r1",
            tag
        ));
        assert!(!contains_whole("anything", ""));
    }

    #[test]
    fn variations_are_the_responses_texts() {
        let domain =
            json!({"responses": {"utter_q": [{"text": "one"}, {"image": "x"}, {"text": "two"}]}});
        assert_eq!(
            variations(&domain, "utter_q"),
            Some(vec!["one".to_owned(), "two".to_owned()])
        );
        assert_eq!(variations(&domain, "utter_other"), None);
        assert_eq!(
            variations(
                &json!({"responses": {"utter_q": [{"image": "x"}]}}),
                "utter_q"
            ),
            None
        );
    }
}
