//! A plain yes read from the reply's words (over 400 lines: most of it the English word lists, which are data).
//!
//! A plain yes (CONTRACT.md section 3): whether a typed reply's own words say yes and
//! nothing else. An NLU model's `affirm` is a reading, and models misread ("No, don't do
//! it" is `affirm` to a keyword classifier), so the guard reads the words too. The English
//! word lists live here; `consent.reply_words` adds to them.
//!
//! A reply, normalised (NFKC, lower case, one apostrophe) and split into words, is a plain
//! yes when it holds an affirmation, nothing that negates, hedges, sets a condition, puts
//! the change off, asks or points elsewhere (a refusal wins even where the question itself
//! uses the word), and no word but those, fillers, and the words of the label and of the
//! subscription as the question named them.

use std::cell::OnceCell;
use std::collections::{HashMap, HashSet};
use std::fmt;

use unicode_normalization::UnicodeNormalization;

/// What a word (or a phrase of a few words) does in a reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Says yes.
    Affirms,
    /// Says nothing either way (please, thanks, it, …).
    Fills,
    Negates,
    Hedges,
    SetsACondition,
    PutsItOff,
    Asks,
    PointsElsewhere,
    /// A word added with `consent.reply_words.refuse`.
    Refuses,
}

impl Role {
    fn refuses(self) -> bool {
        !matches!(self, Self::Affirms | Self::Fills)
    }

    fn verb(self) -> &'static str {
        match self {
            Self::Affirms | Self::Fills => "is plain",
            Self::Negates => "negates",
            Self::Hedges => "hedges",
            Self::SetsACondition => "sets a condition",
            Self::PutsItOff => "puts the change off",
            Self::Asks => "asks a question",
            Self::PointsElsewhere => "points to something else",
            Self::Refuses => "is not a yes",
        }
    }
}

const AFFIRMS: &[&str] = &[
    "i do",
    "i will",
    "i can confirm",
    "i mean it",
    "that is what i want",
    "thats what i want",
    "✓",
    "yes",
    "yeah",
    "yea",
    "yep",
    "yup",
    "ya",
    "yah",
    "ye",
    "yeh",
    "yas",
    "yass",
    "yessir",
    "yes sir",
    "y",
    "sure",
    "sure thing",
    "for sure",
    "ok",
    "okay",
    "okey",
    "okie",
    "k",
    "kk",
    "okie dokie",
    "okey dokey",
    "alright",
    "all right",
    "alrighty",
    "aight",
    "fine",
    "good",
    "great",
    "perfect",
    "excellent",
    "cool",
    "lovely",
    "brilliant",
    "awesome",
    "wonderful",
    "go ahead",
    "go on",
    "go for it",
    "do it",
    "do that",
    "please do",
    "proceed",
    "confirm",
    "confirmed",
    "correct",
    "right",
    "exactly",
    "agreed",
    "agree",
    "absolutely",
    "definitely",
    "certainly",
    "of course",
    "sounds good",
    "sounds great",
    "sounds fine",
    "sounds right",
    "looks good",
    "affirmative",
    "indeed",
    "uh huh",
    "by all means",
    "deal",
    "approved",
    "accept",
    "accepted",
    "yes indeed",
    "oki",
    "ofc",
    "totally",
    "100",
    "works",
    "that works",
    "works for me",
    "make the change",
    "make that change",
    "make this change",
    "make it so",
    "that's what i want",
    "👍",
    "✅",
    "👌",
    "✔",
    "☑",
    "🆗",
    "💯",
    "🙌",
];

const FILLS: &[&str] = &[
    "please",
    "pls",
    "plz",
    "thanks",
    "thank",
    "thank you",
    "thx",
    "ty",
    "tysm",
    "cheers",
    "ta",
    "you",
    "i",
    "i'm",
    "im",
    "i am",
    "me",
    "my",
    "it",
    "it's",
    "its",
    "it is",
    "that",
    "that's",
    "thats",
    "that is",
    "this",
    "this is",
    "these",
    "those",
    "just",
    "so",
    "then",
    "well",
    "oh",
    "ah",
    "the",
    "a",
    "an",
    "and",
    "to",
    "on",
    "for",
    "terms",
    "now",
    "right now",
    "go",
    "ahead",
    "make",
    "change",
    "we",
    "let's",
    "lets",
    "us",
    "much",
    "very",
    "so much",
    "sir",
    "madam",
    "mate",
    "dear",
    "hi",
    "hey",
    "hello",
    "you can",
    "you may",
    "ma'am",
    "maam",
    "by",
    "with",
    "one",
    "😊",
    "🙂",
    "😀",
    "😄",
    "😁",
    "🙏",
    "❤",
    "♥",
];

const NEGATES: &[&str] = &[
    // Polite refusals built of a filler and a yes-word.
    "i'm good",
    "im good",
    "i am good",
    "i'm fine",
    "im fine",
    "i am fine",
    "i'm ok",
    "im ok",
    "i am ok",
    "i'm okay",
    "im okay",
    "i'm alright",
    "im alright",
    "i am alright",
    "i'm all right",
    "im all right",
    "i'm all good",
    "im all good",
    "yeah right",
    "good for you",
    "¬",
    "no",
    "not",
    "never",
    "nope",
    "nah",
    "naw",
    "nay",
    "none",
    "nothing",
    "neither",
    "nor",
    "without",
    "dont",
    "cant",
    "wont",
    "isnt",
    "doesnt",
    "didnt",
    "shouldnt",
    "wouldnt",
    "couldnt",
    "arent",
    "wasnt",
    "werent",
    "havent",
    "hasnt",
    "aint",
    "mustnt",
    "neednt",
    "refuse",
    "decline",
    "declined",
    "reject",
    "wrong",
    "incorrect",
    "false",
    "negative",
    "nevermind",
    "nvm",
    "👎",
    "❌",
    "🚫",
    "✖",
    "✋",
    "🛑",
];

const HEDGES: &[&str] = &[
    "maybe",
    "perhaps",
    "probably",
    "possibly",
    "might",
    "may",
    "guess",
    "unsure",
    "think",
    "suppose",
    "kinda",
    "kind of",
    "sort of",
    "sorta",
    "hm",
    "hmm",
    "um",
    "umm",
    "uh",
    "erm",
    "er",
    "eh",
    "idk",
    "dunno",
    "really",
    "hope",
    "whatever",
    "apparently",
    "🤔",
    "🤷",
    "😕",
    "😐",
    "😬",
];

const SETS_A_CONDITION: &[&str] = &[
    "if",
    "unless",
    "but",
    "only",
    "provided",
    "providing",
    "assuming",
    "except",
    "however",
    "although",
    "though",
    "as long as",
    "so long as",
    "condition",
    "otherwise",
    "depends",
    "depending",
    "in case",
];

const PUTS_IT_OFF: &[&str] = &[
    "wait",
    "hold on",
    "hang on",
    "hold",
    "later",
    "tomorrow",
    "first",
    "soon",
    "sec",
    "moment",
    "minute",
    "yet",
    "until",
    "till",
    "til",
    "tonight",
    "next week",
    "in a bit",
    "let me",
    "give me",
    "check",
    "⏳",
    "⌛",
];

const ASKS: &[&str] = &[
    "?", "what", "why", "how", "when", "where", "which", "who", "whom", "whose", "is", "are", "am",
    "was", "does", "did", "can", "could", "would", "should", "will", "shall", "mean", "explain",
];

const POINTS_ELSEWHERE: &[&str] = &[
    "instead",
    "actually",
    "different",
    "other",
    "another",
    "else",
    "rather",
    "prefer",
    "also",
    "plus",
    "additionally",
];

/// Words added to the lists (endpoints.yml `actiongate.consent.reply_words`).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct ExtraWords {
    /// Words and phrases that say yes.
    #[serde(default)]
    pub affirm: Vec<String>,
    /// Words that say nothing either way.
    #[serde(default)]
    pub filler: Vec<String>,
    /// Words and phrases that make a reply not a plain yes.
    #[serde(default)]
    pub refuse: Vec<String>,
}

/// The word lists, ready to read replies with: every phrase by its normalised words.
#[derive(Debug, Clone)]
pub struct ReplyWords {
    phrases: HashMap<String, Role>,
    /// The most words in a phrase.
    longest: usize,
}

impl Default for ReplyWords {
    fn default() -> Self {
        Self::new(&ExtraWords::default())
    }
}

/// Why a reply is not a plain yes; `Display` is the `why` the customer's assistant gets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NotPlain {
    /// A word or phrase that refuses: the words as the reply has them (normalised).
    Refusal { words: String, role: Role },
    /// A word that is none of the lists' and not the question's.
    Unexpected(String),
    /// A word of the question on its own, which may mean something else ("stop").
    Alone(String),
    /// Nothing in the reply says yes.
    NoAffirmation,
}

impl fmt::Display for NotPlain {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Refusal { words, .. } if words == "?" => {
                f.write_str("The reply was not a plain yes: it asks a question (\"?\").")
            }
            Self::Refusal { words, role } => write!(
                f,
                "The reply was not a plain yes: \"{words}\" {}.",
                role.verb()
            ),
            Self::Unexpected(word) => write!(
                f,
                "The reply was not a plain yes: \"{word}\" is neither a yes nor a word of the question."
            ),
            Self::Alone(word) => write!(
                f,
                "The reply was not a plain yes: \"{word}\" on its own may mean something else."
            ),
            Self::NoAffirmation => f.write_str("The reply was not a plain yes: it says no yes."),
        }
    }
}

impl ReplyWords {
    /// The built-in lists with `extra` added (an added word takes the role it is added
    /// with, over a built-in one).
    pub fn new(extra: &ExtraWords) -> Self {
        let mut words = Self {
            phrases: HashMap::new(),
            longest: 1,
        };
        for (list, role) in [
            (FILLS, Role::Fills),
            (AFFIRMS, Role::Affirms),
            (NEGATES, Role::Negates),
            (HEDGES, Role::Hedges),
            (SETS_A_CONDITION, Role::SetsACondition),
            (PUTS_IT_OFF, Role::PutsItOff),
            (ASKS, Role::Asks),
            (POINTS_ELSEWHERE, Role::PointsElsewhere),
        ] {
            for phrase in list {
                words.add(phrase, role);
            }
        }
        for (list, role) in [
            (&extra.filler, Role::Fills),
            (&extra.affirm, Role::Affirms),
            (&extra.refuse, Role::Refuses),
        ] {
            for phrase in list {
                words.add(phrase, role);
            }
        }
        words
    }

    fn add(&mut self, phrase: &str, role: Role) {
        let tokens = tokens(phrase);
        if tokens.is_empty() {
            return;
        }
        self.longest = self.longest.max(tokens.len());
        self.phrases.insert(tokens.join(" "), role);
    }

    fn role(&self, phrase: &str) -> Option<Role> {
        self.phrases.get(phrase).copied()
    }

    /// The role of one word not in the lists as written: a contraction ending in "n't"
    /// negates; a word typed with letters held down ("yesss", "okkk") reads as the word.
    fn role_of_word(&self, word: &str) -> Option<Role> {
        if word.ends_with("n't") {
            return Some(Role::Negates);
        }
        let held = squeeze(word, 2);
        self.role(&held).or_else(|| self.role(&squeeze(&held, 1)))
    }

    /// Whether `reply` is a plain yes to a question that named `question_words` (the
    /// label and the subscription as the question showed them).
    pub fn read(&self, reply: &str, question_words: &[&str]) -> Result<(), NotPlain> {
        let words = tokens(reply);
        // Which of the reply's words are the question's, read only once a word of no list
        // needs it (a plain "yes" never does).
        let of_question = OnceCell::new();
        let of_question = || {
            of_question.get_or_init(|| {
                let allowed: HashSet<String> =
                    question_words.iter().flat_map(|q| tokens(q)).collect();
                words
                    .iter()
                    .map(|w| allowed.contains(w))
                    .collect::<Vec<bool>>()
            })
        };
        let mut affirmed = false;
        let mut unexpected: Option<NotPlain> = None;
        let mut at = 0;
        while at < words.len() {
            let (role, len) = self.longest_at(&words, at);
            let span = words[at..at + len].join(" ");
            match role {
                Some(role) if role.refuses() => {
                    return Err(NotPlain::Refusal { words: span, role });
                }
                Some(Role::Affirms) => affirmed = true,
                Some(_) => {}
                None => {
                    // A word of the question counts only beside another word of it ("stop
                    // the renewal", "style box"): alone, "stop", "cancel", "skip" or "next"
                    // say something else ("ok, stop", "fine, skip it").
                    let question = of_question();
                    let beside = (at > 0 && question[at - 1])
                        || question.get(at + 1).copied().unwrap_or(false);
                    match (question[at], beside) {
                        (true, true) => {}
                        (true, false) => {
                            unexpected.get_or_insert(NotPlain::Alone(span));
                        }
                        (false, _) => {
                            unexpected.get_or_insert(NotPlain::Unexpected(span));
                        }
                    }
                }
            }
            at += len;
        }
        match unexpected {
            Some(not_plain) => Err(not_plain),
            None if !affirmed => Err(NotPlain::NoAffirmation),
            None => Ok(()),
        }
    }

    /// The longest phrase of the lists starting at `at`, and how many words it takes; a
    /// word of none of them takes one.
    fn longest_at(&self, words: &[String], at: usize) -> (Option<Role>, usize) {
        let most = self.longest.min(words.len() - at);
        for len in (2..=most).rev() {
            if let Some(role) = self.role(&words[at..at + len].join(" ")) {
                return (Some(role), len);
            }
        }
        let word = &words[at];
        (self.role(word).or_else(|| self.role_of_word(word)), 1)
    }
}

/// The reply's words: NFKC-normalised (full-width letters and punctuation become plain
/// ones), lower case, every apostrophe as `'`; a word is a run of letters and digits
/// (apostrophes inside it kept), a question mark and each emoji are words of their own,
/// anything else separates words. Emoji modifiers (skin tones, variation selectors, joiners)
/// are dropped.
pub fn tokens(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut word = String::new();
    let flush = |word: &mut String, out: &mut Vec<String>| {
        let trimmed = word.trim_matches('\'');
        if !trimmed.is_empty() {
            out.push(trimmed.to_owned());
        }
        word.clear();
    };
    for c in text.nfkc().flat_map(char::to_lowercase) {
        let c = match c {
            '\u{2019}' | '\u{2018}' | '\u{02BC}' | '\u{2032}' | '`' | '\u{00B4}' => '\'',
            c => c,
        };
        if c.is_alphanumeric() || (c == '\'' && !word.is_empty()) {
            word.push(c);
            continue;
        }
        flush(&mut word, &mut out);
        // Question marks of other scripts too (the interrobang, Armenian, Ethiopic, the
        // Greek one); `¬` negates.
        if matches!(
            c,
            '?' | '\u{00BF}'
                | '\u{061F}'
                | '\u{2E2E}'
                | '\u{203D}'
                | '\u{055E}'
                | '\u{1367}'
                | '\u{037E}'
        ) {
            out.push("?".to_owned());
        } else if c == '\u{00AC}' {
            out.push("¬".to_owned());
        } else if is_emoji(c) {
            out.push(c.to_string());
        }
    }
    flush(&mut word, &mut out);
    out
}

/// A pictograph that stands as a word (👍, ✅, ❌): symbols outside ASCII and general
/// punctuation, but not the modifiers that only change how one looks.
fn is_emoji(c: char) -> bool {
    let code = c as u32;
    let modifier = matches!(code, 0x1F3FB..=0x1F3FF | 0xFE00..=0xFE0F | 0x200D | 0x20E3);
    let punctuation = matches!(code, 0x2000..=0x206F | 0x3000..=0x303F);
    code >= 0x2190 && !modifier && !punctuation && !c.is_alphanumeric()
}

/// `word` with every run of one letter cut to at most `keep` letters.
fn squeeze(word: &str, keep: usize) -> String {
    let mut out = String::with_capacity(word.len());
    let mut last = None;
    let mut run = 0;
    for c in word.chars() {
        run = if Some(c) == last { run + 1 } else { 1 };
        last = Some(c);
        // Letters held down, never digits ("1000" is not "100").
        if run <= keep || !c.is_alphabetic() {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests;
