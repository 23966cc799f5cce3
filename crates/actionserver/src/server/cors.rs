//! CORS with rasa-sdk's matching rules: `*` allows every origin, an origin containing `*`
//! is a glob whose `*` does not cross `/`, one containing regex metacharacters is a
//! case-insensitive full-match regex, and anything else a case-insensitive literal.

use regex::Regex;

/// The allowed origins given with `--cors`.
#[derive(Debug, Clone, Default)]
pub struct CorsPolicy {
    any: bool,
    literals: Vec<String>,
    patterns: Vec<Regex>,
}

const REGEX_CHARS: &[char] = &['\\', '[', ']', '(', ')', '+', '|', '^', '$', '?', '{', '}'];

impl CorsPolicy {
    /// Builds the policy; an invalid regex is an error naming it.
    pub fn new(origins: &[String]) -> Result<Self, String> {
        let mut policy = Self::default();
        for origin in origins {
            if origin == "*" {
                policy.any = true;
            } else if origin.contains(REGEX_CHARS) {
                let re = Regex::new(&format!("(?i)^(?:{origin})$"))
                    .map_err(|e| format!("--cors {origin:?} is not a valid pattern: {e}"))?;
                policy.patterns.push(re);
            } else if origin.contains('*') {
                let glob = origin
                    .split('*')
                    .map(regex::escape)
                    .collect::<Vec<_>>()
                    .join("[^/]*");
                policy.patterns.push(
                    Regex::new(&format!("(?i)^{glob}$")).expect("an escaped glob is a valid regex"),
                );
            } else {
                policy.literals.push(origin.to_ascii_lowercase());
            }
        }
        policy.literals.sort();
        Ok(policy)
    }

    /// Whether any origin is allowed.
    pub fn is_enabled(&self) -> bool {
        self.any || !self.literals.is_empty() || !self.patterns.is_empty()
    }

    /// Whether this origin is allowed.
    pub fn allows(&self, origin: &str) -> bool {
        self.any
            || self.literals.iter().any(|l| l.eq_ignore_ascii_case(origin))
            || self.patterns.iter().any(|p| p.is_match(origin))
    }

    /// Whether the answer depends on the origin (then `Vary: Origin` is sent).
    pub fn varies(&self) -> bool {
        self.any || self.literals.len() > 1 || !self.patterns.is_empty()
    }

    /// `Access-Control-Allow-Origin` for a request with these `Origin` headers.
    pub fn allow_origin(&self, origins: &[&str]) -> Option<String> {
        match origins {
            [] if self.any => Some("*".to_owned()),
            [origin] if self.allows(origin) => Some((*origin).to_owned()),
            _ => None,
        }
    }
}

/// `Access-Control-Allow-Headers`: the requested names, trimmed and sorted.
pub fn allow_headers(requested: &str) -> String {
    let mut names: Vec<&str> = requested
        .split(',')
        .map(str::trim)
        .filter(|n| !n.is_empty())
        .collect();
    names.sort_unstable();
    names.join(", ")
}

pub const ALLOW_METHODS: &str = "DELETE, GET, HEAD, OPTIONS, PATCH, POST, PUT";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_do_not_cross_slashes_and_patterns_match_whole() {
        let p = CorsPolicy::new(&["https://*.corp.example".into()]).unwrap();
        assert!(p.allows("https://app.corp.example"));
        assert!(p.allows("HTTPS://APP.corp.example"));
        assert!(!p.allows("https://x.corp.example.attacker.example"));
        assert!(!p.allows("https://a/b.corp.example"));
    }

    #[test]
    fn literals_are_case_insensitive_and_regexes_full_match() {
        let p = CorsPolicy::new(&["https://A.example".into(), r"https://(b|c)\.example".into()])
            .unwrap();
        assert!(p.allows("https://a.example"));
        assert!(p.allows("https://C.example"));
        assert!(!p.allows("https://c.example.evil"));
        assert_eq!(allow_headers(" X-Foo ,content-type"), "X-Foo, content-type");
    }
}
