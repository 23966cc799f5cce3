//! Readiness: whether the server should be sent calls now (`GET /ready`, and the gRPC
//! health service's status), as against `GET /health`, which says only that the process
//! answers. The application supplies the check (its store reachable, say), run at most
//! once a second whatever the probes; the server adds that it is not stopping.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use futures_util::future::BoxFuture;

/// The application's check: `Err` says why the server should not be sent calls now.
pub type ReadinessCheck = Arc<dyn Fn() -> BoxFuture<'static, Result<(), String>> + Send + Sync>;

/// How long the check may take before the answer is "not ready".
const CHECK_TIMEOUT: Duration = Duration::from_secs(2);

/// How long an answer is reused: probes, however many, run the check at most this often,
/// one at a time, so they never take the store's connections from the actions.
const REUSE: Duration = Duration::from_secs(1);

#[derive(Default)]
pub(crate) struct Readiness {
    check: RwLock<Option<ReadinessCheck>>,
    draining: AtomicBool,
    last: tokio::sync::Mutex<Option<(tokio::time::Instant, Result<(), String>)>>,
}

impl Readiness {
    pub(crate) fn set(&self, check: ReadinessCheck) {
        *self.check.write().unwrap_or_else(|p| p.into_inner()) = Some(check);
    }

    pub(crate) fn drain(&self) {
        self.draining.store(true, Ordering::SeqCst);
    }

    /// Ready, or why not.
    pub(crate) async fn now(&self) -> Result<(), String> {
        if self.draining.load(Ordering::SeqCst) {
            return Err("the server is stopping".to_owned());
        }
        let check = self.check.read().unwrap_or_else(|p| p.into_inner()).clone();
        let Some(check) = check else {
            return Ok(());
        };
        // Held while the check runs: the probes that arrive meanwhile take its answer.
        let mut last = self.last.lock().await;
        if let Some((at, answer)) = &*last {
            if at.elapsed() < REUSE {
                return answer.clone();
            }
        }
        let answer = match tokio::time::timeout(CHECK_TIMEOUT, check()).await {
            Ok(answer) => answer,
            Err(_) => Err(format!(
                "the readiness check did not answer within {} s",
                CHECK_TIMEOUT.as_secs()
            )),
        };
        *last = Some((tokio::time::Instant::now(), answer.clone()));
        answer
    }
}
