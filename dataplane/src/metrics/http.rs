//! Handles on the HTTP series, taken once per route (and per method and
//! status within it), so the middleware that counts every answer builds no
//! key and looks nothing up in the registry after a route's first answers.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use metrics::{Counter, Gauge, Histogram};

use super::{
    ERRORS_TOTAL, HTTP_BATCH_BODY_BUDGET_REJECTIONS_TOTAL, HTTP_REQUEST_BYTES_IN_TOTAL,
    HTTP_REQUEST_DURATION_SECONDS, HTTP_REQUESTS_IN_FLIGHT, HTTP_REQUESTS_TOTAL,
    HTTP_RESPONSE_BYTES_OUT_TOTAL, NodeMetrics, SCHEMA_REJECTION_REASONS, SCHEMA_REJECTIONS_TOTAL,
};

/// The methods labelled by name; any other is labelled `other`, so a client
/// cannot grow the label set by inventing methods.
const METHODS: [&str; 9] = [
    "GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH",
];

/// The `method` label of `method`.
pub fn method_label(method: &str) -> &'static str {
    METHODS
        .iter()
        .find(|known| **known == method)
        .copied()
        .unwrap_or("other")
}

/// The series of one answer kind: a route, a method and a status.
#[derive(Debug)]
pub struct AnswerHandles {
    /// [`HTTP_REQUESTS_TOTAL`].
    pub requests: Counter,
    /// [`HTTP_REQUEST_DURATION_SECONDS`].
    pub duration: Histogram,
}

/// The series of one route.
pub struct RouteHandles {
    route: Box<str>,
    /// [`HTTP_REQUEST_BYTES_IN_TOTAL`].
    pub bytes_in: Counter,
    /// [`HTTP_RESPONSE_BYTES_OUT_TOTAL`].
    pub bytes_out: Counter,
    answers: parking_lot::RwLock<HashMap<(&'static str, u16), Arc<AnswerHandles>>>,
}

impl fmt::Debug for RouteHandles {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RouteHandles")
            .field("route", &self.route)
            .finish_non_exhaustive()
    }
}

impl RouteHandles {
    /// The handles of this route's answers with `method` (a label of
    /// [`method_label`]) and `status`, taken on first use.
    pub fn answered(
        &self,
        metrics: &NodeMetrics,
        method: &'static str,
        status: u16,
    ) -> Arc<AnswerHandles> {
        if let Some(handles) = self.answers.read().get(&(method, status)) {
            return Arc::clone(handles);
        }
        let labels = [
            ("route", self.route.to_string()),
            ("method", method.to_owned()),
            ("status", status.to_string()),
        ];
        let handles = Arc::new(AnswerHandles {
            requests: metrics.counter(HTTP_REQUESTS_TOTAL, &labels),
            duration: metrics.histogram(HTTP_REQUEST_DURATION_SECONDS, &labels),
        });
        Arc::clone(
            self.answers
                .write()
                .entry((method, status))
                .or_insert(handles),
        )
    }
}

/// The HTTP series of a node: the ones without labels taken at once, the
/// routes' at their first request.
pub struct HttpHandles {
    /// [`HTTP_REQUESTS_IN_FLIGHT`].
    pub in_flight: Gauge,
    /// [`ERRORS_TOTAL`] with component `http`, kind `5xx`.
    pub server_errors: Counter,
    /// [`HTTP_BATCH_BODY_BUDGET_REJECTIONS_TOTAL`].
    pub body_budget_rejections: Counter,
    /// [`SCHEMA_REJECTIONS_TOTAL`] per reason, as
    /// [`SCHEMA_REJECTION_REASONS`].
    pub schema_rejections: [Counter; SCHEMA_REJECTION_REASONS.len()],
    routes: parking_lot::RwLock<HashMap<Box<str>, Arc<RouteHandles>>>,
}

impl fmt::Debug for HttpHandles {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpHandles")
            .field("routes", &self.routes.read().len())
            .finish_non_exhaustive()
    }
}

impl HttpHandles {
    /// Takes the handles of the series without a route from `metrics`;
    /// they are served (at 0) from then on.
    pub fn new(metrics: &NodeMetrics) -> Self {
        Self {
            in_flight: metrics.gauge(HTTP_REQUESTS_IN_FLIGHT, &[]),
            server_errors: metrics.counter(
                ERRORS_TOTAL,
                &[("component", "http".to_owned()), ("kind", "5xx".to_owned())],
            ),
            body_budget_rejections: metrics.counter(HTTP_BATCH_BODY_BUDGET_REJECTIONS_TOTAL, &[]),
            schema_rejections: SCHEMA_REJECTION_REASONS.map(|reason| {
                metrics.counter(SCHEMA_REJECTIONS_TOTAL, &[("reason", reason.to_owned())])
            }),
            routes: parking_lot::RwLock::new(HashMap::new()),
        }
    }

    /// The schema rejections counter of `reason`, if it is one of
    /// [`SCHEMA_REJECTION_REASONS`].
    pub fn schema_rejections(&self, reason: &str) -> Option<&Counter> {
        let index = SCHEMA_REJECTION_REASONS
            .iter()
            .position(|known| *known == reason)?;
        Some(&self.schema_rejections[index])
    }

    /// The handles of `route` (a matched route template, or `unmatched`:
    /// never a raw path, so the set stays the router's), taken on first use.
    pub fn route(&self, metrics: &NodeMetrics, route: &str) -> Arc<RouteHandles> {
        if let Some(handles) = self.routes.read().get(route) {
            return Arc::clone(handles);
        }
        let labels = [("route", route.to_owned())];
        let handles = Arc::new(RouteHandles {
            route: route.into(),
            bytes_in: metrics.counter(HTTP_REQUEST_BYTES_IN_TOTAL, &labels),
            bytes_out: metrics.counter(HTTP_RESPONSE_BYTES_OUT_TOTAL, &labels),
            answers: parking_lot::RwLock::new(HashMap::new()),
        });
        Arc::clone(self.routes.write().entry(route.into()).or_insert(handles))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_invented_method_is_labelled_other() {
        assert_eq!(method_label("POST"), "POST");
        assert_eq!(method_label("BREW"), "other");
    }

    #[test]
    fn handles_count_into_the_series_of_their_labels() {
        let metrics = NodeMetrics::new();
        let http = HttpHandles::new(&metrics);
        let route = http.route(&metrics, "/v1/topics/{topic}/produce");
        route.bytes_in.increment(10);
        let answer = route.answered(&metrics, "POST", 202);
        answer.requests.increment(1);
        // The second lookup hands back the same series.
        http.route(&metrics, "/v1/topics/{topic}/produce")
            .answered(&metrics, "POST", 202)
            .requests
            .increment(1);
        http.server_errors.increment(1);
        let text = metrics.render();
        assert!(
            text.contains(
                r#"narad_http_requests_total{route="/v1/topics/{topic}/produce",method="POST",status="202"} 2"#
            ),
            "{text}"
        );
        assert!(text.contains(
            r#"narad_http_request_bytes_in_total{route="/v1/topics/{topic}/produce"} 10"#
        ));
        assert!(text.contains(r#"narad_errors_total{component="http",kind="5xx"} 1"#));
    }
}
