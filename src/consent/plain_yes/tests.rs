//! The unit tests of the plain-yes reader, reply by reply.

use super::*;

const LABEL: &str = "Stop renewal at the end of the current period";
const SUBSCRIPTION: &str = "WS-SUB-3304 (Style Box, monthly)";

fn read(reply: &str) -> Result<(), NotPlain> {
    ReplyWords::default().read(reply, &[LABEL, SUBSCRIPTION])
}

fn refused_by(reply: &str) -> (String, Role) {
    match read(reply) {
        Err(NotPlain::Refusal { words, role }) => (words, role),
        other => panic!("{reply:?}: {other:?}"),
    }
}

#[test]
fn plain_yeses_are_yes() {
    for reply in [
        "yes",
        "Yes please",
        "ok",
        "Sure!",
        "go ahead",
        "Yes, do it.",
        "yep 👍",
        "I confirm",
        "that's fine, thanks",
        "Yes, on those terms",
    ] {
        assert_eq!(read(reply), Ok(()), "{reply:?}");
    }
}

#[test]
fn each_refusing_kind_refuses_with_its_word() {
    for (reply, words, role) in [
        ("No, don't do it", "no", Role::Negates),
        ("don't", "don't", Role::Negates),
        ("ok not now", "not", Role::Negates),
        ("I'm not sure", "not", Role::Negates),
        ("sure, maybe", "maybe", Role::Hedges),
        ("yes if there is no fee", "if", Role::SetsACondition),
        ("yes but keep the box", "but", Role::SetsACondition),
        ("yes, later", "later", Role::PutsItOff),
        ("ok hold on", "hold on", Role::PutsItOff),
        ("Is that ok", "is", Role::Asks),
        (
            "yes, a different change",
            "different",
            Role::PointsElsewhere,
        ),
        ("yes, the other one", "other", Role::PointsElsewhere),
    ] {
        assert_eq!(refused_by(reply), (words.to_owned(), role), "{reply:?}");
    }
}

#[test]
fn a_question_mark_asks_even_after_a_yes() {
    assert_eq!(refused_by("ok?"), ("?".to_owned(), Role::Asks));
    assert_eq!(refused_by("Are you sure?").1, Role::Asks);
    assert_eq!(
        read("ok?").unwrap_err().to_string(),
        "The reply was not a plain yes: it asks a question (\"?\")."
    );
    // Full-width and inverted question marks too.
    assert_eq!(refused_by("ｏｋ？").0, "?");
    assert_eq!(refused_by("¿sí").0, "?");
}

#[test]
fn a_refusal_wins_even_where_the_question_uses_the_word() {
    // The question says "If you meant a different change": the words still refuse.
    let words = ReplyWords::default();
    let question = ["If you meant a different change, say which"];
    assert_eq!(
        words.read("yes, a different change", &question),
        Err(NotPlain::Refusal {
            words: "different".into(),
            role: Role::PointsElsewhere
        })
    );
}

#[test]
fn words_of_the_label_and_the_subscription_are_allowed_others_are_not() {
    assert_eq!(read("yes, stop the renewal"), Ok(()));
    assert_eq!(read("yes, stop renewal at the end of the period"), Ok(()));
    assert_eq!(read("yes for the style box"), Ok(()));
    assert_eq!(read("yes WS-SUB-3304"), Ok(()));
    // The entitlements line says "no refund"; its words are not the label's.
    assert_eq!(
        read("yes, refund me"),
        Err(NotPlain::Unexpected("refund".into()))
    );
    assert_eq!(
        read("yes to the coffee club"),
        Err(NotPlain::Unexpected("coffee".into()))
    );
    // Without the question's words, the label's words are unexpected too.
    assert_eq!(
        ReplyWords::default().read("yes, stop the renewal", &[]),
        Err(NotPlain::Unexpected("stop".into()))
    );
}

#[test]
fn without_an_affirmation_nothing_is_a_yes() {
    assert_eq!(read("thanks"), Err(NotPlain::NoAffirmation));
    assert_eq!(read(""), Err(NotPlain::NoAffirmation));
    assert_eq!(read("!!!"), Err(NotPlain::NoAffirmation));
    assert_eq!(read("stop the renewal"), Err(NotPlain::NoAffirmation));
}

#[test]
fn unicode_case_and_typing_habits() {
    for reply in [
        "YES",
        "ｙｅｓ",      // full-width letters
        "that’s fine", // a curly apostrophe
        "👍",
        "👍🏽", // a skin tone
        "✔️", // with a variation selector
        "yesss",
        "Okkk!!",
        "yes.",
        "  yes  ",
    ] {
        assert_eq!(read(reply), Ok(()), "{reply:?}");
    }
    assert_eq!(refused_by("don’t").1, Role::Negates);
    assert_eq!(refused_by("dont do it").1, Role::Negates);
    assert_eq!(refused_by("NOOO").1, Role::Negates);
    assert_eq!(refused_by("👎").1, Role::Negates);
    assert_eq!(refused_by("yes 🤔").1, Role::Hedges);
}

#[test]
fn the_longest_phrase_decides() {
    // "not sure" and "sure" both match at "sure"'s place; "not" is read first.
    assert_eq!(refused_by("not sure").0, "not");
    // "go ahead" is one affirmation; "hold on" one refusal.
    assert_eq!(read("go ahead"), Ok(()));
    assert_eq!(refused_by("hold on, yes").0, "hold on");
    // "you can" fills, "can you" asks.
    assert_eq!(read("yes you can"), Ok(()));
    assert_eq!(refused_by("can you do it").0, "can");
}

#[test]
fn added_words_take_their_role() {
    let extra = ExtraWords {
        affirm: vec!["ja".into(), "oui d'accord".into()],
        filler: vec!["bitte".into()],
        refuse: vec!["nein".into(), "yes".into()],
    };
    let words = ReplyWords::new(&extra);
    assert_eq!(words.read("ja bitte", &[]), Ok(()));
    assert_eq!(words.read("Oui d’accord", &[]), Ok(()));
    assert_eq!(
        words.read("nein", &[]),
        Err(NotPlain::Refusal {
            words: "nein".into(),
            role: Role::Refuses
        })
    );
    // An added word's role is taken over a built-in one.
    assert!(words.read("yes", &[]).is_err());
}

#[test]
fn polite_refusals_and_a_label_word_alone_are_not_a_yes() {
    for reply in [
        "I'm good, thanks",
        "Thanks, I'm fine",
        "I'm ok",
        "im alright",
        "yeah right",
        "good for you",
        "¬yes",
        "yes‽",
    ] {
        assert!(
            matches!(read(reply), Err(NotPlain::Refusal { .. })),
            "{reply:?}"
        );
    }
    // "stop" is a word of the label, but alone it can mean "stop, don't".
    assert_eq!(read("ok, stop"), Err(NotPlain::Alone("stop".into())));
    assert_eq!(read("ok stop it"), Err(NotPlain::Alone("stop".into())));
    assert_eq!(read("yes, stop the renewal"), Ok(()));
    let wine = [
        "Cancel now and close the cellar account",
        "WS-SUB-7001 (Wine Club, quarterly)",
    ];
    let words = ReplyWords::default();
    assert!(words.read("ok, cancel that", &wine).is_err());
    assert!(words.read("ok close it", &wine).is_err());
    assert_eq!(words.read("yes, cancel now", &wine), Ok(()));
    // Digits are not letters held down; "do" is no filler.
    assert!(read("1000").is_err());
    assert!(read("ok do I").is_err());
    for reply in [
        "Yes, I can confirm",
        "yes I will",
        "yes I do",
        "thats what i want",
        "✓",
    ] {
        assert_eq!(read(reply), Ok(()), "{reply:?}");
    }
}

#[test]
fn tokens_split_as_documented() {
    assert_eq!(tokens("No, don't!"), ["no", "don't"]);
    assert_eq!(tokens("'yes'"), ["yes"]);
    assert_eq!(tokens("ok?👍🏽"), ["ok", "?", "👍"]);
    assert_eq!(tokens("WS-SUB-3304"), ["ws", "sub", "3304"]);
}
