//! One HTTP client for each thread that calls the service, built alike, so a call stays on
//! the thread (and the runtime) that makes it.

use std::sync::Arc;

use super::transport::Http;

/// An HTTP client for each thread that calls. The server's workers each run their own
/// runtime, and a connection's task runs on the runtime that opened it: with one client for
/// all, a call from one worker over a connection another opened is handed to that other
/// thread and back (two wake-ups and a switch of threads per call). Each thread's client
/// opens its own connections, so a call stays on the thread that makes it. The clients are
/// built alike; a thread's is dropped once every clone of its [`PerThread`] is.
#[derive(Clone)]
pub(crate) struct PerThread {
    build: Arc<dyn Fn() -> Result<Http, rustls::Error> + Send + Sync>,
    /// The client for a thread whose own could not be built (it was, once, with the same
    /// settings), and the mark of this family of clients.
    pub(super) shared: Arc<Http>,
}

thread_local! {
    /// This thread's clients, each beside its family's mark (gone once the family is).
    pub(super) static CLIENTS: std::cell::RefCell<Vec<(std::sync::Weak<Http>, Http)>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

impl PerThread {
    pub(crate) fn new(
        build: impl Fn() -> Result<Http, rustls::Error> + Send + Sync + 'static,
    ) -> Result<Self, rustls::Error> {
        let shared = Arc::new(build()?);
        Ok(Self {
            build: Arc::new(build),
            shared,
        })
    }

    /// The calling thread's client (a clone shares its connections).
    pub(crate) fn get(&self) -> Http {
        CLIENTS.with(|clients| {
            let mut clients = clients.borrow_mut();
            if let Some((_, client)) = clients
                .iter()
                .find(|(mark, _)| std::ptr::eq(mark.as_ptr(), Arc::as_ptr(&self.shared)))
            {
                return client.clone();
            }
            clients.retain(|(mark, _)| mark.strong_count() > 0);
            let client = (self.build)().unwrap_or_else(|_| (*self.shared).clone());
            clients.push((Arc::downgrade(&self.shared), client.clone()));
            client
        })
    }
}

impl std::fmt::Debug for PerThread {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PerThread").finish_non_exhaustive()
    }
}
