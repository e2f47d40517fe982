//! The operator's metrics, in Prometheus' text exposition (OpenMetrics)
//! at `GET /metrics`: HTTP requests by route, the domain's counters (runs,
//! rows, gateway validations, notification deliveries) and the run
//! queue's depth. Labels carry no organization data: routes are patterns
//! (`/v1/organizations/{orgId}/flows`), statuses and outcomes are closed
//! lists.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use std::sync::Mutex;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Request {
    method: String,
    route: String,
    status: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Route {
    method: String,
    route: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Status {
    status: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Outcome {
    outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct FlowLabel {
    flow: String,
}

/// Every metric of the process.
pub struct Metrics {
    registry: Mutex<Registry>,
    requests: Family<Request, Counter>,
    durations: Family<Route, Histogram>,
    runs: Family<Status, Counter>,
    rows: Counter,
    run_durations: Histogram,
    validations: Family<Outcome, Counter>,
    deliveries: Family<Outcome, Counter>,
    queue_depth: Gauge,
    cdc_retained: Family<FlowLabel, Gauge>,
    cdc_lag: Family<FlowLabel, Gauge<f64, std::sync::atomic::AtomicU64>>,
    /// When each flow's destination last held everything its source had:
    /// the lag is the time since, as of each scrape.
    caught_up: Mutex<std::collections::HashMap<String, time::OffsetDateTime>>,
}

fn request_buckets() -> Histogram {
    // 0.5 ms to about 16 s.
    Histogram::new(exponential_buckets(0.0005, 2.0, 16))
}

impl Default for Metrics {
    fn default() -> Self {
        let m = Metrics {
            registry: Mutex::new(Registry::default()),
            requests: Family::default(),
            durations: Family::new_with_constructor(request_buckets),
            runs: Family::default(),
            rows: Counter::default(),
            // 0.1 s to about 27 hours.
            run_durations: Histogram::new(exponential_buckets(0.1, 2.5, 14)),
            validations: Family::default(),
            deliveries: Family::default(),
            queue_depth: Gauge::default(),
            cdc_retained: Family::default(),
            cdc_lag: Family::default(),
            caught_up: Mutex::default(),
        };
        {
            let mut r = m.registry.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            r.register("http_requests", "HTTP requests answered", m.requests.clone());
            r.register("http_request_duration_seconds", "Time to answer an HTTP request", m.durations.clone());
            r.register("sluice_runs", "Runs ended, by status", m.runs.clone());
            r.register("sluice_rows_synced", "Rows written by ended runs", m.rows.clone());
            r.register("sluice_run_duration_seconds", "Time from a run's start to its end", m.run_durations.clone());
            r.register("sluice_gateway_validations", "Gateway validations answered, by outcome", m.validations.clone());
            r.register("sluice_webhook_deliveries", "Notification delivery attempts, by outcome", m.deliveries.clone());
            r.register("sluice_queue_depth", "Runs waiting for a worker", m.queue_depth.clone());
            r.register(
                "sluice_cdc_retained_bytes",
                "Write-ahead log a flow's source keeps for its change stream, as of its last read",
                m.cdc_retained.clone(),
            );
            r.register(
                "sluice_cdc_lag_seconds",
                "Time since a flow's destination last held every change its source had",
                m.cdc_lag.clone(),
            );
        }
        // Every label value known beforehand shows from the first scrape, at 0.
        for status in ["succeeded", "failed", "canceled", "drift_detected"] {
            let _ = m.runs.get_or_create(&Status { status: status.into() });
        }
        for outcome in ["valid", "invalid", "no_json", "quota_exceeded"] {
            let _ = m.validations.get_or_create(&Outcome { outcome: outcome.into() });
        }
        for outcome in ["delivered", "failed", "refused"] {
            let _ = m.deliveries.get_or_create(&Outcome { outcome: outcome.into() });
        }
        m
    }
}

impl Metrics {
    /// Counts one answered request; `route` is the matched pattern.
    pub fn request(&self, method: &str, route: &str, status: u16, seconds: f64) {
        let (method, route) = (method.to_string(), route.to_string());
        self.requests
            .get_or_create(&Request { method: method.clone(), route: route.clone(), status: status.to_string() })
            .inc();
        self.durations.get_or_create(&Route { method, route }).observe(seconds);
    }

    /// The exposition, with the queue's depth as of now.
    pub fn render(&self, queue_depth: Option<u64>) -> String {
        if let Some(d) = queue_depth {
            self.queue_depth.set(i64::try_from(d).unwrap_or(i64::MAX));
        }
        let now = time::OffsetDateTime::now_utc();
        for (flow, at) in self.caught_up.lock().unwrap_or_else(std::sync::PoisonError::into_inner).iter() {
            let lag = (now - *at).as_seconds_f64().max(0.0);
            self.cdc_lag.get_or_create(&FlowLabel { flow: flow.clone() }).set(lag);
        }
        let mut out = String::new();
        let r = self.registry.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Err(e) = prometheus_client::encoding::text::encode(&mut out, &r) {
            tracing::error!(error = %e, "encoding the metrics failed");
        }
        out
    }
}

impl sluice_domain::monitoring::ports::Metrics for Metrics {
    fn run_finished(&self, status: &str, rows: u64, seconds: f64) {
        self.runs.get_or_create(&Status { status: status.to_string() }).inc();
        self.rows.inc_by(rows);
        self.run_durations.observe(seconds);
    }

    fn gateway_validation(&self, outcome: &'static str) {
        self.validations.get_or_create(&Outcome { outcome: outcome.to_string() }).inc();
    }

    fn webhook_delivery(&self, outcome: &'static str) {
        self.deliveries.get_or_create(&Outcome { outcome: outcome.to_string() }).inc();
    }

    fn cdc_stream(&self, flow: &str, retained_bytes: u64, caught_up: Option<time::OffsetDateTime>) {
        let label = FlowLabel { flow: flow.to_string() };
        self.cdc_retained.get_or_create(&label).set(i64::try_from(retained_bytes).unwrap_or(i64::MAX));
        if let Some(at) = caught_up {
            self.caught_up.lock().unwrap_or_else(std::sync::PoisonError::into_inner).insert(label.flow, at);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_domain::monitoring::ports::Metrics as _;

    #[test]
    fn the_exposition_names_every_metric_with_its_labels() {
        let m = Metrics::default();
        m.request("GET", "/v1/organizations/{orgId}", 200, 0.002);
        m.run_finished("succeeded", 42, 3.5);
        m.gateway_validation("valid");
        m.webhook_delivery("delivered");
        m.cdc_stream("0194c4a2-0000-7000-8000-000000000001", 4096, Some(time::OffsetDateTime::now_utc()));
        let text = m.render(Some(7));
        for line in [
            "http_requests_total{method=\"GET\",route=\"/v1/organizations/{orgId}\",status=\"200\"} 1",
            "sluice_runs_total{status=\"succeeded\"} 1",
            "sluice_rows_synced_total 42",
            "sluice_gateway_validations_total{outcome=\"valid\"} 1",
            "sluice_webhook_deliveries_total{outcome=\"delivered\"} 1",
            "sluice_queue_depth 7",
            "sluice_run_duration_seconds_count 1",
            "sluice_cdc_retained_bytes{flow=\"0194c4a2-0000-7000-8000-000000000001\"} 4096",
            "sluice_cdc_lag_seconds{flow=\"0194c4a2-0000-7000-8000-000000000001\"} 0.",
        ] {
            assert!(text.contains(line), "{line} in\n{text}");
        }
        assert!(text.contains("http_request_duration_seconds_bucket{"), "{text}");
        assert!(text.ends_with("# EOF\n"), "{text}");
    }
}
