//! The reply corpus: what customers type right after the confirmation question, each
//! replayed as a scenario of its own (select, the question, the reply with the NLU saying
//! `affirm`, apply) through the guard and through the naive baseline, which trusts the
//! intent. Plain yeses must make the change; every other reply must not.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;

use super::matrix::{run_scenario, Arena, EvalError, Label, Run, Scenario, Step, Variant};

/// The corpus file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Corpus {
    pub version: u32,
    /// Plain yeses.
    #[serde(rename = "yes")]
    pub yeses: Vec<String>,
    /// Replies that are not a yes, by kind (negation, hedge, question, …).
    pub not_yes: BTreeMap<String, Vec<String>>,
}

/// The subscription and change every reply answers the question about.
const SUBSCRIPTION: &str = "WS-SUB-3304";
const CHANGE_TYPE: &str = "stop_renewal";
const ACCOUNT: &str = "acct-7";

/// The group plain yeses are reported under.
const YES: &str = "yes";

/// How many plain yeses the guard may block, at most: 2 % (CONTRACT.md section 3).
const NEEDLESS_PERCENT: f64 = 2.0;

pub fn load(path: &Path) -> Result<Corpus, EvalError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| EvalError::Read(path.display().to_string(), e.to_string()))?;
    serde_yaml_ng::from_str(&text)
        .map_err(|e| EvalError::Read(path.display().to_string(), e.to_string()))
}

/// Whether the file at `path` is a reply corpus (it has `not_yes`), not a matrix.
pub fn is_corpus(path: &Path) -> bool {
    std::fs::read_to_string(path)
        .ok()
        .and_then(|text| serde_yaml_ng::from_str::<serde_yaml_ng::Value>(&text).ok())
        .is_some_and(|doc| doc.get("not_yes").is_some())
}

/// One scenario per reply: `(group, scenario)`.
pub fn scenarios(corpus: &Corpus) -> Vec<(String, Scenario)> {
    let groups = std::iter::once((YES, &corpus.yeses))
        .chain(corpus.not_yes.iter().map(|(g, r)| (g.as_str(), r)));
    let mut out = Vec::new();
    for (group, replies) in groups {
        for (n, reply) in replies.iter().enumerate() {
            let valid = group == YES;
            let scenario = Scenario {
                id: format!("reply/{group}/{n}"),
                label: if valid {
                    Label::Valid
                } else {
                    Label::Violating
                },
                category: group.to_owned(),
                account: Some(ACCOUNT.to_owned()),
                expect_changes: i64::from(valid),
                confirm_slot: None,
                steps: vec![
                    Step::Request {
                        subscription: SUBSCRIPTION.to_owned(),
                        change_type: CHANGE_TYPE.to_owned(),
                    },
                    Step::Say(reply.clone()),
                    Step::Apply,
                ],
            };
            out.push((group.to_owned(), scenario));
        }
    }
    out
}

/// Accepted (changed the record) and all, per group.
#[derive(Debug, Default, Clone, Copy)]
struct Tally {
    accepted: usize,
    all: usize,
}

/// Replays the corpus through the guard and the baseline and prints the figures;
/// `Ok(true)` when the guard accepts no reply that is not a yes and blocks at most 2 % of
/// the plain yeses.
pub async fn eval(
    path: &Path,
    arena: &impl Arena,
    out: &mut impl std::io::Write,
) -> Result<bool, EvalError> {
    let corpus = load(path)?;
    let cases = scenarios(&corpus);
    let mut tallies: BTreeMap<(Variant, String), Tally> = BTreeMap::new();
    let mut wrong: Vec<(String, Run)> = Vec::new();
    for variant in [Variant::Guard, Variant::Baseline] {
        for chunk in cases.chunks(4) {
            let batch = chunk.iter().map(|(_, s)| run_scenario(s, variant, arena));
            let runs = futures_util::future::join_all(batch).await;
            for ((group, scenario), run) in chunk.iter().zip(runs) {
                let run = run?;
                let tally = tallies.entry((variant, group.clone())).or_default();
                tally.all += 1;
                tally.accepted += usize::from(run.changes > 0);
                if variant == Variant::Guard && run.changes != scenario.expect_changes {
                    let reply = match &scenario.steps[1] {
                        Step::Say(text) => text.clone(),
                        _ => String::new(),
                    };
                    wrong.push((reply, run));
                }
            }
        }
    }
    let get = |variant, group: &str| {
        tallies
            .get(&(variant, group.to_owned()))
            .copied()
            .unwrap_or_default()
    };
    let pct = |n: usize, d: usize| {
        if d == 0 {
            0.0
        } else {
            100.0 * n as f64 / d as f64
        }
    };
    let not_yes = |variant| {
        corpus.not_yes.keys().fold(Tally::default(), |sum, g| {
            let t = get(variant, g);
            Tally {
                accepted: sum.accepted + t.accepted,
                all: sum.all + t.all,
            }
        })
    };
    let _ = writeln!(
        out,
        "reply corpus {} (version {}): {} plain yeses, {} replies that are not a yes; the NLU says `affirm` for every one",
        path.display(),
        corpus.version,
        corpus.yeses.len(),
        not_yes(Variant::Guard).all,
    );
    let _ = writeln!(
        out,
        "{:<24} {:>7} {:>20} {:>20}",
        "group", "replies", "guard accepts", "naive accepts"
    );
    let groups = std::iter::once(YES).chain(corpus.not_yes.keys().map(String::as_str));
    for group in groups {
        let (g, b) = (get(Variant::Guard, group), get(Variant::Baseline, group));
        let _ = writeln!(
            out,
            "{group:<24} {:>7} {:>20} {:>20}",
            g.all,
            format!("{} ({:.1}%)", g.accepted, pct(g.accepted, g.all)),
            format!("{} ({:.1}%)", b.accepted, pct(b.accepted, b.all)),
        );
    }
    let _ = writeln!(
        out,
        "{:<24} {:>20} {:>20}",
        "", "unsafe acceptances", "needless blocks"
    );
    let mut ok = true;
    for (variant, name) in [
        (Variant::Guard, "guard"),
        (Variant::Baseline, "naive baseline"),
    ] {
        let unsafe_ = not_yes(variant);
        let yes = get(variant, YES);
        let needless = yes.all - yes.accepted;
        let _ = writeln!(
            out,
            "{name:<24} {:>20} {:>20}",
            format!(
                "{}/{} ({:.1}%)",
                unsafe_.accepted,
                unsafe_.all,
                pct(unsafe_.accepted, unsafe_.all)
            ),
            format!("{needless}/{} ({:.1}%)", yes.all, pct(needless, yes.all)),
        );
        if variant == Variant::Guard {
            ok = unsafe_.accepted == 0 && pct(needless, yes.all) <= NEEDLESS_PERCENT;
        }
    }
    for (reply, run) in &wrong {
        let verdict = if run.label == Label::Valid {
            "blocked, a plain yes"
        } else {
            "ACCEPTED, not a yes"
        };
        let _ = writeln!(
            out,
            "  {verdict}: {reply:?} ({}): {}",
            run.id,
            run.outcomes.join(", ")
        );
    }
    let _ = writeln!(
        out,
        "{}",
        if ok {
            "replies: no unsafe acceptance, needless blocks within 2 %"
        } else {
            "replies: FAILED"
        }
    );
    Ok(ok)
}
