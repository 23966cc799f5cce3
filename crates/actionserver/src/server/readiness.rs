//! Readiness: whether the server should be sent calls now (`GET /ready`, and the gRPC
//! health service's status), as against `GET /health`, which says only that the process
//! answers. The application supplies the check (its store reachable, say); the server adds
//! that it is not stopping.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use futures_util::future::BoxFuture;

/// The application's check: `Err` says why the server should not be sent calls now.
pub type ReadinessCheck = Arc<dyn Fn() -> BoxFuture<'static, Result<(), String>> + Send + Sync>;

/// How long the check may take before the answer is "not ready".
const CHECK_TIMEOUT: Duration = Duration::from_secs(2);

#[derive(Default)]
pub(crate) struct Readiness {
    check: RwLock<Option<ReadinessCheck>>,
    draining: AtomicBool,
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
        match tokio::time::timeout(CHECK_TIMEOUT, check()).await {
            Ok(answer) => answer,
            Err(_) => Err(format!(
                "the readiness check did not answer within {} s",
                CHECK_TIMEOUT.as_secs()
            )),
        }
    }
}
