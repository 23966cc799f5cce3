//! What an application adds to the HTTP server: routes of its own and one middleware
//! ([`HttpExtras`]), served beside the webhook on the same listener.

use std::future::Future;
use std::sync::Arc;

use actix_web::body::BoxBody;
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::middleware::Next;
use actix_web::web::ServiceConfig;
use futures_util::future::LocalBoxFuture;

type Routes = Arc<dyn Fn(&mut ServiceConfig) + Send + Sync>;
type Middleware = Arc<
    dyn Fn(
            ServiceRequest,
            Next<BoxBody>,
        ) -> LocalBoxFuture<'static, Result<ServiceResponse<BoxBody>, actix_web::Error>>
        + Send
        + Sync,
>;

/// Routes and a middleware for [`ActionServer::http_with`](crate::ActionServer::http_with).
///
/// The routes are matched before the server's 404 and answer as the application writes
/// them (the server's token does not guard them: check what they need). The middleware
/// wraps every request, the webhook's included, inside the server's own protections (the
/// connection caps, the request span and metrics, CORS), so it sees only what those let
/// through; to run several, call them one after another inside it.
#[derive(Clone, Default)]
pub struct HttpExtras {
    pub(crate) routes: Option<Routes>,
    pub(crate) middleware: Option<Middleware>,
}

impl HttpExtras {
    /// Adds routes, as actix-web's `App::configure` does (`cfg.route(...)`,
    /// `cfg.service(...)`, `cfg.app_data(...)`). Called once per worker.
    pub fn routes(
        mut self,
        configure: impl Fn(&mut ServiceConfig) + Send + Sync + 'static,
    ) -> Self {
        self.routes = Some(Arc::new(configure));
        self
    }

    /// Wraps every request, as actix-web's `middleware::from_fn` does: call
    /// `next.call(req).await` to go on, or answer yourself.
    pub fn middleware<F, Fut>(mut self, middleware: F) -> Self
    where
        F: Fn(ServiceRequest, Next<BoxBody>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<ServiceResponse<BoxBody>, actix_web::Error>> + 'static,
    {
        self.middleware = Some(Arc::new(move |req, next| Box::pin(middleware(req, next))));
        self
    }
}

/// The application's middleware, or straight on.
pub(crate) async fn apply(
    middleware: Option<Middleware>,
    req: ServiceRequest,
    next: Next<BoxBody>,
) -> Result<ServiceResponse<BoxBody>, actix_web::Error> {
    match middleware {
        Some(middleware) => middleware(req, next).await,
        None => next.call(req).await,
    }
}
