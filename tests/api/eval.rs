//! The consent matrix: the file is valid and large enough, and its runner counts changes
//! at the service (a violating scenario changes the record through the naive baseline and
//! not through the guard). `actiongate-dev eval` replays the whole matrix in CI.

use crate::common;

use std::collections::BTreeSet;
use std::path::Path;

use tools::eval::{load, run_scenario, Arena, EvalError, Label, Running, Variant};

/// A fresh app per scenario, as `actiongate-dev eval` starts them.
struct Fresh;

impl Arena for Fresh {
    async fn start(&self, confirm_slot: Option<&str>) -> Result<Running, EvalError> {
        let slot = confirm_slot.map(str::to_owned);
        let app = common::spawn_app_with(&[], |s| s.consent.signals.confirm_slot = slot).await;
        let store = app.store.clone();
        Ok(Running {
            server: app.url.clone(),
            service: app.service_url.clone(),
            handle: app.handle.clone(),
            keep: Box::new(app),
            close: Some(Box::pin(async move { store.close().await })),
            stripe: None,
        })
    }
}

fn matrix_path() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("eval/consent-matrix.yml")
}

#[test]
fn the_matrix_covers_every_category_with_enough_scenarios() {
    let matrix = load(&matrix_path()).unwrap();
    assert!(matrix.scenarios.len() >= 200, "{}", matrix.scenarios.len());
    let categories: BTreeSet<&str> = matrix
        .scenarios
        .iter()
        .map(|s| s.category.as_str())
        .collect();
    for needed in [
        "happy",
        "ambiguous_request",
        "confirmation_of_another_change",
        "unrelated_yes",
        "intent_not_words",
        "stale_revision",
        "moved_date",
        "hidden_benefit_loss",
        "question_without_effective",
        "expired",
        "foreign_account",
        "memory_from_entities",
        "duplicate_delivery",
        "restart_before_answer",
        "rewound_answer",
    ] {
        assert!(categories.contains(needed), "missing {needed}");
    }
    let ids: BTreeSet<&str> = matrix.scenarios.iter().map(|s| s.id.as_str()).collect();
    assert_eq!(ids.len(), matrix.scenarios.len(), "ids are unique");
    assert!(matrix.scenarios.iter().any(|s| s.label == Label::Valid));
}

/// The committed matrix is what its generator writes from the demo data: a category edited
/// in the script, or data changed, without regenerating fails here. And every scenario's
/// label agrees with what it lets the service do.
#[test]
fn the_matrix_is_what_make_matrix_writes_and_its_labels_agree() {
    let dir = tempfile::tempdir().unwrap();
    let fresh = dir.path().join("matrix.yml");
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let status = std::process::Command::new("python3")
        .arg(root.join("eval/make_matrix.py"))
        .arg(&fresh)
        .stdout(std::process::Stdio::null())
        .status()
        .expect("python3 runs");
    assert!(status.success());
    assert!(
        std::fs::read_to_string(&fresh).unwrap() == std::fs::read_to_string(matrix_path()).unwrap(),
        "eval/consent-matrix.yml is not what eval/make_matrix.py writes: run it and commit"
    );
    let matrix = load(&matrix_path()).unwrap();
    for s in &matrix.scenarios {
        match s.label {
            Label::Valid => assert_eq!(s.expect_changes, 1, "{}", s.id),
            _ => assert!(s.expect_changes <= 1, "{}", s.id),
        }
    }
}

#[tokio::test]
async fn the_runner_counts_changes_at_the_service() {
    let matrix = load(&matrix_path()).unwrap();
    let hidden = matrix
        .scenarios
        .iter()
        .find(|s| s.id == "hidden_benefit_loss/WS-SUB-3304/stop_renewal")
        .unwrap();
    let guarded = run_scenario(hidden, Variant::Guard, &Fresh).await.unwrap();
    assert_eq!(guarded.changes, 0, "{:?}", guarded.outcomes);
    let naive = run_scenario(hidden, Variant::Baseline, &Fresh)
        .await
        .unwrap();
    assert_eq!(naive.changes, 1, "{:?}", naive.outcomes);
    let happy = matrix
        .scenarios
        .iter()
        .find(|s| s.id == "happy/WS-SUB-5120/pause_four_weeks")
        .unwrap();
    assert_eq!(
        run_scenario(happy, Variant::Guard, &Fresh)
            .await
            .unwrap()
            .changes,
        1
    );
}
