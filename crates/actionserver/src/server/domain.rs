//! The domain an action reads: Rasa Pro sends it once and then only its digest (the 449
//! exchange); Rasa 3.x sends the same text with every call. Both are cached here.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde_json::Value;

use crate::protocol::WebhookRequest;

/// Domains by digest. Rasa Pro sends only the digest once the server has seen the domain.
#[derive(Default)]
pub(super) struct DomainCache {
    by_digest: Mutex<HashMap<String, Arc<Value>>>,
    /// The last non-empty domain, for a request that sends `domain: {}` (as rasa-sdk does).
    last: Mutex<Option<Arc<Value>>>,
    /// The text of the last domain parsed, and what it parsed to: Rasa 3.x sends the same
    /// domain with every call and no digest, so comparing the text (a memcmp) spares
    /// parsing it again.
    last_text: Mutex<Option<(Box<str>, Arc<Value>)>>,
}

/// At most this many domains are kept (one per assistant version in practice).
const DOMAIN_CACHE_SIZE: usize = 32;

impl DomainCache {
    /// The domain the action gets, or `None` when it must be asked for (449).
    pub(super) fn resolve(
        &self,
        request: &WebhookRequest<'_>,
    ) -> Result<Option<Arc<Value>>, serde_json::Error> {
        let digest = request.domain_digest.as_deref().filter(|d| !d.is_empty());
        if let Some(raw) = &request.domain {
            let seen = self.last_text.lock().unwrap_or_else(|e| e.into_inner());
            if let Some((_, domain)) = seen.as_ref().filter(|(text, _)| **text == *raw.get()) {
                let domain = domain.clone();
                drop(seen);
                return Ok(Some(self.keep(domain, digest)));
            }
        }
        let given: Option<Value> = match &request.domain {
            Some(raw) => Some(serde_json::from_str(raw.get())?),
            None => None,
        };
        match given {
            Some(Value::Object(map)) if !map.is_empty() => {
                let domain = Arc::new(Value::Object(map));
                if let Some(raw) = &request.domain {
                    *self.last_text.lock().unwrap_or_else(|e| e.into_inner()) =
                        Some((raw.get().into(), domain.clone()));
                }
                Ok(Some(self.keep(domain, digest)))
            }
            // `{}` is no domain: the digest's when it names one (an unknown digest is asked
            // for, 449, never answered with another assistant's domain); the last one seen
            // when there is no digest (rasa-sdk's callers send `{}` alone).
            Some(Value::Object(_)) if digest.is_some() => Ok(self.cached(digest)),
            Some(Value::Object(_)) => {
                Ok(self.last.lock().unwrap_or_else(|e| e.into_inner()).clone())
            }
            Some(Value::Null) | None => Ok(self.cached(digest)),
            Some(other) => Ok(Some(Arc::new(other))),
        }
    }

    /// Remembers a non-empty domain: under its digest (when it came with one), and as the
    /// last one.
    fn keep(&self, domain: Arc<Value>, digest: Option<&str>) -> Arc<Value> {
        if let Some(digest) = digest {
            let mut cache = self.by_digest.lock().unwrap_or_else(|e| e.into_inner());
            if cache.len() >= DOMAIN_CACHE_SIZE && !cache.contains_key(digest) {
                cache.clear();
            }
            if !cache.get(digest).is_some_and(|d| Arc::ptr_eq(d, &domain)) {
                cache.insert(digest.to_owned(), domain.clone());
            }
        }
        *self.last.lock().unwrap_or_else(|e| e.into_inner()) = Some(domain.clone());
        domain
    }

    fn cached(&self, digest: Option<&str>) -> Option<Arc<Value>> {
        let cache = self.by_digest.lock().unwrap_or_else(|e| e.into_inner());
        cache.get(digest?).cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(body: &str) -> WebhookRequest<'_> {
        WebhookRequest::parse(body.as_bytes()).unwrap().unwrap()
    }

    #[test]
    fn the_same_domain_text_is_parsed_once_and_a_new_one_replaces_it() {
        let cache = DomainCache::default();
        let a = r#"{"next_action": "x", "domain": {"responses": {"utter_q": [{"text": "one"}]}}}"#;
        let first = cache.resolve(&request(a)).unwrap().unwrap();
        let again = cache.resolve(&request(a)).unwrap().unwrap();
        assert!(Arc::ptr_eq(&first, &again), "the cached parse is reused");
        let b = r#"{"next_action": "x", "domain": {"responses": {"utter_q": [{"text": "two"}]}}}"#;
        let changed = cache.resolve(&request(b)).unwrap().unwrap();
        assert_eq!(changed["responses"]["utter_q"][0]["text"], "two");
        // Digest only, after a domain came with that digest: the cached one.
        let with_digest = r#"{"next_action": "x", "domain_digest": "D", "domain": {"responses": {"utter_q": [{"text": "one"}]}}}"#;
        let kept = cache.resolve(&request(with_digest)).unwrap().unwrap();
        assert_eq!(kept, first);
        let digest_only = cache
            .resolve(&request(r#"{"next_action": "x", "domain_digest": "D"}"#))
            .unwrap()
            .unwrap();
        assert_eq!(digest_only["responses"]["utter_q"][0]["text"], "one");
        // An unknown digest and no domain: asked for (449).
        assert!(cache
            .resolve(&request(r#"{"next_action": "x", "domain_digest": "E"}"#))
            .unwrap()
            .is_none());
        // `{}` is not a domain to remember: the last one is used.
        let empty = cache
            .resolve(&request(r#"{"next_action": "x", "domain": {}}"#))
            .unwrap()
            .unwrap();
        assert_eq!(empty["responses"]["utter_q"][0]["text"], "one");
        // `{}` with a known digest: that digest's domain; with an unknown one: asked for,
        // not answered with the last domain seen (another assistant's, perhaps).
        let known = cache
            .resolve(&request(
                r#"{"next_action": "x", "domain": {}, "domain_digest": "D"}"#,
            ))
            .unwrap()
            .unwrap();
        assert_eq!(known["responses"]["utter_q"][0]["text"], "one");
        assert!(cache
            .resolve(&request(
                r#"{"next_action": "x", "domain": {}, "domain_digest": "E"}"#
            ))
            .unwrap()
            .is_none());
    }
}
