//! The subscription service's records, as its HTTP API carries them.

use serde::{Deserialize, Serialize};
use time::format_description::well_known::Rfc3339;
use time::macros::format_description;
use time::OffsetDateTime;

/// A subscription record.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Subscription {
    pub id: String,
    pub account: String,
    pub product: String,
    pub plan: String,
    pub status: String,
    #[serde(default)]
    pub revision: i64,
    #[serde(default)]
    pub options: Vec<ChangeOption>,
    #[serde(default)]
    pub notes: Vec<Note>,
}

/// A change the service offers on a subscription, with its terms.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ChangeOption {
    pub change_type: String,
    pub label: String,
    /// RFC 3339, UTC.
    pub effective_at: String,
    /// What the customer keeps and loses, in one line.
    pub entitlements: String,
    /// The business wants a person to approve this change before it is made
    /// (CONTRACT.md section 7).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub review: bool,
}

/// Why a record changed; `revision` names the revision the change produced.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Note {
    #[serde(default)]
    pub revision: i64,
    pub at: String,
    pub text: String,
}

/// A change the service made.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Change {
    pub request_key: String,
    pub subscription: String,
    pub change_type: String,
    pub status: String,
    pub effective_at: String,
    pub revision: i64,
}

impl Subscription {
    pub fn option(&self, change_type: &str) -> Option<&ChangeOption> {
        self.options.iter().find(|o| o.change_type == change_type)
    }

    /// `WS-SUB-3304 (Style Box, monthly)`.
    pub fn display_name(&self) -> String {
        format!("{} ({}, {})", self.id, self.product, self.plan)
    }

    /// The notes explaining revisions after `revision`, joined: a blocked outcome's `why`.
    pub fn why_since(&self, revision: i64) -> Option<String> {
        self.why_since_as(revision, RevisionFormat::Decimal)
    }

    /// The `why` for revisions written in `format`.
    pub fn why_since_as(&self, revision: i64, format: RevisionFormat) -> Option<String> {
        let texts: Vec<&str> = self
            .notes
            .iter()
            .filter(|n| format.explains(n.revision, revision))
            .map(|n| n.text.as_str())
            .collect();
        (!texts.is_empty()).then(|| texts.join(" "))
    }
}

/// How a provider's revisions are written in a change tag: section 6's integers (`r4`) or
/// section 8's fingerprints, the first 10 hex digits of a digest of the fields that decide
/// the terms (`r3fa9c01b2e`, 40 bits). The same text can read as either, so a tag is always
/// read in the format of the provider that wrote it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RevisionFormat {
    #[default]
    Decimal,
    Fingerprint,
}

/// The number of hex digits of a fingerprint revision.
pub const FINGERPRINT_DIGITS: usize = 10;

impl RevisionFormat {
    /// The revision as the tag writes it, after its `r`.
    pub fn write(self, revision: i64) -> String {
        match self {
            Self::Decimal => revision.to_string(),
            Self::Fingerprint => format!("{revision:010x}"),
        }
    }

    /// The revision from the tag's text after its `r`, or `None`.
    pub fn read(self, text: &str) -> Option<i64> {
        match self {
            Self::Decimal if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) => {
                text.parse().ok()
            }
            Self::Fingerprint
                if text.len() == FINGERPRINT_DIGITS
                    && text.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) =>
            {
                i64::from_str_radix(text, 16).ok()
            }
            _ => None,
        }
    }

    /// Whether a note written at `note` explains what moved since the confirmed
    /// `revision`: a later integer; for fingerprints, which have no order, the note
    /// the provider wrote from exactly that revision to now.
    pub fn explains(self, note: i64, revision: i64) -> bool {
        match self {
            Self::Decimal => note > revision,
            Self::Fingerprint => note == revision,
        }
    }
}

/// `{subscription id} {change type} r{revision}`.
pub fn change_tag(subscription: &str, change_type: &str, revision: i64) -> String {
    change_tag_as(subscription, change_type, revision, RevisionFormat::Decimal)
}

/// The change tag with the revision in `format`.
pub fn change_tag_as(
    subscription: &str,
    change_type: &str,
    revision: i64,
    format: RevisionFormat,
) -> String {
    format!("{subscription} {change_type} r{}", format.write(revision))
}

/// A parsed change tag.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tag {
    pub subscription: String,
    pub change_type: String,
    pub revision: i64,
}

impl Tag {
    /// Parses `WS-SUB-3304 stop_renewal r4`, from the right: the revision, then the change
    /// type, and the rest is the subscription's id (which may hold spaces, but does not
    /// begin or end with one). Anything else is `None`.
    pub fn parse(tag: &str) -> Option<Self> {
        Self::parse_as(tag, RevisionFormat::Decimal)
    }

    /// Parses a tag whose revision is written in `format`.
    pub fn parse_as(tag: &str, format: RevisionFormat) -> Option<Self> {
        let (rest, revision) = tag.rsplit_once(' ')?;
        let (subscription, change_type) = rest.rsplit_once(' ')?;
        let revision = format.read(revision.strip_prefix('r')?)?;
        if subscription.is_empty()
            || subscription.trim() != subscription
            || subscription.contains("  ")
            || change_type.is_empty()
        {
            return None;
        }
        Some(Self {
            subscription: subscription.to_owned(),
            change_type: change_type.to_owned(),
            revision,
        })
    }
}

/// `2027-01-01T00:00:00Z` → `2027-01-01 00:00 UTC`, the form read out to the customer.
pub fn effective_text(effective_at: &str) -> Option<String> {
    let at = OffsetDateTime::parse(effective_at, &Rfc3339).ok()?;
    let at = at.to_offset(time::UtcOffset::UTC);
    at.format(format_description!(
        "[year]-[month]-[day] [hour]:[minute] UTC"
    ))
    .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_round_trip_and_reject_anything_else() {
        let tag = Tag::parse(&change_tag("WS-SUB-3304", "stop_renewal", 4)).unwrap();
        assert_eq!(tag.revision, 4);
        // Ids may hold spaces: the tag is read from the right.
        let spaced = Tag::parse("ACME BOX 7 stop_renewal r12").unwrap();
        assert_eq!(
            (
                spaced.subscription.as_str(),
                spaced.change_type.as_str(),
                spaced.revision
            ),
            ("ACME BOX 7", "stop_renewal", 12)
        );
        for bad in [
            "",
            "WS-SUB-3304",
            "WS-SUB-3304 stop_renewal",
            "WS-SUB-3304 stop_renewal 4",
            "WS-SUB-3304 stop_renewal r",
            "WS-SUB-3304 stop_renewal r4 x",
            " WS-SUB-3304 stop_renewal r4",
            "WS-SUB-3304 stop_renewal r4 ",
            "WS-SUB-3304  stop_renewal r4",
            "WS-SUB-3304 stop_renewal r-4",
            "stop_renewal",
        ] {
            assert_eq!(Tag::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn fingerprint_tags_round_trip_and_are_read_only_as_fingerprints() {
        let f = RevisionFormat::Fingerprint;
        let tag = change_tag_as("sub_1Q2w", "stop_renewal", 0x3fa9c01b2e, f);
        assert_eq!(tag, "sub_1Q2w stop_renewal r3fa9c01b2e");
        assert_eq!(Tag::parse_as(&tag, f).unwrap().revision, 0x3fa9c01b2e);
        // A fingerprint is not an integer revision, and neither is read as the other.
        assert_eq!(Tag::parse(&tag), None);
        assert_eq!(Tag::parse_as("sub_1Q2w stop_renewal r4", f), None);
        for bad in ["r3fa9c01b2", "r3fa9c01b2e0", "r3FA9C01B2E", "r3fa9c01b2g"] {
            assert_eq!(
                Tag::parse_as(&format!("sub_1 stop_renewal {bad}"), f),
                None,
                "{bad}"
            );
        }
        // Leading zeros are kept: 10 digits always.
        assert_eq!(change_tag_as("s", "c", 1, f), "s c r0000000001");
    }

    #[test]
    fn effective_dates_are_read_out_in_utc() {
        assert_eq!(
            effective_text("2027-01-01T00:00:00Z").unwrap(),
            "2027-01-01 00:00 UTC"
        );
        assert_eq!(
            effective_text("2027-01-01T01:30:00+01:00").unwrap(),
            "2027-01-01 00:30 UTC"
        );
        assert_eq!(effective_text("tomorrow"), None);
    }
}
