//! Request counters and a latency histogram, exposed in Prometheus' text format on
//! `GET /metrics`.

use std::collections::HashMap;
use std::fmt::Write;
use std::sync::Mutex;
use std::time::Duration;

const BUCKETS: [f64; 12] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0,
];

#[derive(Default)]
struct Histogram {
    counts: [u64; BUCKETS.len()],
    sum: f64,
    count: u64,
}

/// Writes more metrics, in Prometheus' text format, after the server's own.
pub type MetricsSource = Box<dyn Fn(&mut String) + Send + Sync>;

/// Counts requests by route, action and status, and their latency by route.
#[derive(Default)]
pub struct Metrics {
    inner: Mutex<Inner>,
    sources: std::sync::RwLock<Vec<MetricsSource>>,
}

/// Counts by route, then action, then status: looked up by `&str`, so a request
/// allocates only the first time its combination is seen.
#[derive(Default)]
struct Inner {
    requests: HashMap<String, HashMap<String, HashMap<u16, u64>>>,
    latency: HashMap<String, Histogram>,
}

fn slot<'m, V: Default>(map: &'m mut HashMap<String, V>, key: &str) -> &'m mut V {
    if !map.contains_key(key) {
        map.insert(key.to_owned(), V::default());
    }
    map.get_mut(key).expect("just inserted")
}

impl Metrics {
    pub fn record(&self, route: &str, action: &str, status: u16, elapsed: Duration) {
        let secs = elapsed.as_secs_f64();
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        *slot(slot(&mut inner.requests, route), action)
            .entry(status)
            .or_default() += 1;
        let histogram = slot(&mut inner.latency, route);
        for (count, bound) in histogram.counts.iter_mut().zip(BUCKETS) {
            if secs <= bound {
                *count += 1;
            }
        }
        histogram.sum += secs;
        histogram.count += 1;
    }

    /// The Prometheus text exposition.
    pub fn render(&self) -> String {
        let inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let mut out = String::new();
        out.push_str(
            "# HELP actiongate_requests_total Requests served, by route, action and status.\n",
        );
        out.push_str("# TYPE actiongate_requests_total counter\n");
        let mut requests: Vec<(&String, &String, u16, u64)> = inner
            .requests
            .iter()
            .flat_map(|(route, actions)| {
                actions.iter().flat_map(move |(action, statuses)| {
                    statuses.iter().map(move |(s, n)| (route, action, *s, *n))
                })
            })
            .collect();
        requests.sort();
        for (route, action, status, n) in requests {
            let _ = writeln!(
                out,
                "actiongate_requests_total{{route=\"{}\",action=\"{}\",status=\"{status}\"}} {n}",
                escape(route),
                escape(action)
            );
        }
        out.push_str(
            "# HELP actiongate_request_duration_seconds Time to answer a request, by route.\n",
        );
        out.push_str("# TYPE actiongate_request_duration_seconds histogram\n");
        let mut latency: Vec<(&String, &Histogram)> = inner.latency.iter().collect();
        latency.sort_by_key(|(route, _)| *route);
        for (route, h) in latency {
            let route = escape(route);
            for (count, bound) in h.counts.iter().zip(BUCKETS) {
                let _ = writeln!(
                    out,
                    "actiongate_request_duration_seconds_bucket{{route=\"{route}\",le=\"{bound}\"}} {count}"
                );
            }
            let _ = writeln!(
                out,
                "actiongate_request_duration_seconds_bucket{{route=\"{route}\",le=\"+Inf\"}} {}",
                h.count
            );
            let _ = writeln!(
                out,
                "actiongate_request_duration_seconds_sum{{route=\"{route}\"}} {}",
                h.sum
            );
            let _ = writeln!(
                out,
                "actiongate_request_duration_seconds_count{{route=\"{route}\"}} {}",
                h.count
            );
        }
        drop(inner);
        for source in self
            .sources
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
        {
            source(&mut out);
        }
        out
    }

    /// Adds a source of more metrics to `GET /metrics`.
    pub fn add_source(&self, source: MetricsSource) {
        self.sources
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .push(source);
    }
}

fn escape(label: &str) -> String {
    label
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}
