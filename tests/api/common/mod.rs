//! The product's part of the tests' support: a fresh app per test (its own ports, SQLite
//! files and embedded subscription service), started in-process from a command line.
//! Everything else the tests drive it with comes from the testkit crate, re-exported here.

use clap::Parser;

use actiongate::app;
use actiongate::cli::Cli;
use actiongate::config::Settings;
#[allow(unused_imports)] // each test binary uses its own part
pub use testkit::*;

/// A running app: the action server and its embedded subscription service. It derefs to
/// the service, so `app.record(id)` reads the record the app changes.
pub struct TestApp {
    pub url: String,
    pub endpoint: Endpoint,
    pub service: Service,
    pub service_url: String,
    pub http: reqwest::Client,
    pub dir: tempfile::TempDir,
    pub handle: actix_web::dev::ServerHandle,
    pub store: actiongate::store::Store,
    pub guard: actiongate::consent::Guard,
    /// The gRPC ActionService, when the app serves it beside the webhook (`--grpc-port`).
    pub grpc: Option<app::GrpcRunning>,
    /// The service events listener, when the app receives events (`--events-port`).
    pub events: Option<app::EventsRunning>,
    /// The operator console, when served (`--admin-port`).
    pub console: Option<app::EventsRunning>,
    /// The housekeeping task and the embedded service, stopped with the app.
    _background: app::Background,
}

impl std::ops::Deref for TestApp {
    type Target = Service;

    fn deref(&self) -> &Service {
        &self.service
    }
}

/// Settings for a test: loopback, port 0, a temp data dir, no endpoints file.
pub fn test_settings(dir: &std::path::Path, extra: &[&str]) -> Settings {
    let endpoints = dir.join("endpoints.yml");
    std::fs::write(&endpoints, "").unwrap();
    let data = dir.join("data");
    let mut args = vec![
        "actiongate".to_owned(),
        "--host".into(),
        "127.0.0.1".into(),
        "--port".into(),
        "0".into(),
        "--embedded-service-port".into(),
        "0".into(),
        "--data-dir".into(),
        data.display().to_string(),
        "--endpoints".into(),
        endpoints.display().to_string(),
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    let cli = Cli::parse_from(args);
    let mut settings = Settings::resolve(&cli.serve).unwrap();
    settings.server.handle_signals = false;
    settings.server.workers = 2;
    settings
}

pub async fn spawn_app() -> TestApp {
    spawn_app_with(&[], |_| {}).await
}

pub async fn spawn_app_with(extra: &[&str], adjust: impl FnOnce(&mut Settings)) -> TestApp {
    let dir = tempfile::tempdir().unwrap();
    let mut settings = test_settings(dir.path(), extra);
    adjust(&mut settings);
    spawn_settings(settings, dir).await
}

pub async fn spawn_settings(settings: Settings, dir: tempfile::TempDir) -> TestApp {
    let started = app::start(&settings).await.expect("the app starts");
    let http = started.http.expect("the webhook is served");
    let handle = http.handle();
    tokio::spawn(http);
    let service_url = match started.embedded_port {
        Some(port) => format!("http://127.0.0.1:{port}"),
        None => settings.subscriptions_url.clone().unwrap_or_default(),
    };
    let url = format!("http://127.0.0.1:{}", started.port);
    TestApp {
        endpoint: Endpoint::new(&url),
        url,
        service: Service::new(&service_url),
        service_url,
        http: reqwest::Client::new(),
        dir,
        handle,
        store: started.store,
        guard: started.guard,
        grpc: started.grpc,
        events: started.events,
        console: started.console,
        _background: started.background,
    }
}

impl Webhook for TestApp {
    fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }
}

impl TestApp {
    /// POSTs a webhook body; returns status and JSON (Null for a non-JSON body).
    pub async fn webhook(&self, body: &serde_json::Value) -> (u16, serde_json::Value) {
        self.endpoint.webhook(body).await.unwrap()
    }

    /// POSTs raw bytes with the given headers.
    pub async fn post_raw(
        &self,
        path: &str,
        body: Vec<u8>,
        headers: &[(&str, &str)],
    ) -> (u16, reqwest::header::HeaderMap, serde_json::Value) {
        let mut request = self.http.post(format!("{}{path}", self.url)).body(body);
        for (k, v) in headers {
            request = request.header(*k, *v);
        }
        let response = request.send().await.unwrap();
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let json = response.json().await.unwrap_or(serde_json::Value::Null);
        (status, headers, json)
    }

    pub async fn stop(&self) {
        self.handle.stop(false).await;
        if let Some(grpc) = &self.grpc {
            grpc.stop();
        }
        if let Some(events) = &self.events {
            events.handle.stop(false).await;
        }
    }

    /// The app's guard (what an operator's decision goes through).
    pub fn guard(&self) -> actiongate::consent::Guard {
        self.guard.clone()
    }

    /// The console's base URL (`--admin-port 0`).
    pub fn console_url(&self) -> String {
        let port = self
            .console
            .as_ref()
            .expect("the app serves the console")
            .port;
        format!("http://127.0.0.1:{port}")
    }

    /// The events listener's URL (`--events-port 0`).
    pub fn events_url(&self) -> String {
        let port = self.events.as_ref().expect("the app receives events").port;
        format!("http://127.0.0.1:{port}/v1/service-events")
    }

    /// The gRPC endpoint, when served (`--grpc-port 0`).
    pub fn grpc_url(&self) -> String {
        let port = self.grpc.as_ref().expect("the app serves gRPC").port;
        format!("http://127.0.0.1:{port}")
    }
}
