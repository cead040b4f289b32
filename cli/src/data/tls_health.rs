//! What a data node with cluster TLS files tells of its certificates: their
//! expiry as `narad_raft_tls_cert_not_after_seconds{kind="leaf"|"ca"}`, and
//! `/readyz` at 503 (`degraded`) once one is past, on the node's clock.

use std::sync::Arc;

use narad_clock::Clock;
use narad_dataplane::metrics::NodeMetrics;
use narad_protocol::CertificateExpiry;

use super::http::ExpiredCheck;

/// The expiry gauge, as the control node names it.
const CERT_NOT_AFTER_SECONDS: &str = "narad_raft_tls_cert_not_after_seconds";

/// Sets the expiry gauges once: the certificates are read once at start.
pub(crate) fn publish_expiry(metrics: &NodeMetrics, expiry: CertificateExpiry) {
    #[allow(clippy::cast_precision_loss)] // Unix seconds are exact below 2^53
    let seconds = |unix_s: i64| unix_s as f64;
    metrics.set(
        CERT_NOT_AFTER_SECONDS,
        &[("kind", "leaf".to_owned())],
        seconds(expiry.leaf_not_after_s),
    );
    metrics.set(
        CERT_NOT_AFTER_SECONDS,
        &[("kind", "ca".to_owned())],
        seconds(expiry.ca_not_after_s),
    );
}

/// The readiness check of the certificates' expiry, on `clock`'s wall time.
pub(crate) fn expired_check(expiry: CertificateExpiry, clock: Arc<dyn Clock>) -> ExpiredCheck {
    Box::new(move || {
        let now_s = i64::try_from(clock.unix_ms() / 1_000).unwrap_or(i64::MAX);
        expiry.expired(now_s)
    })
}

#[cfg(test)]
mod tests {
    use narad_clock::ManualClock;
    use narad_protocol::Expired;

    use super::*;

    #[test]
    fn expiry_is_judged_on_the_nodes_clock() {
        let expiry = CertificateExpiry {
            leaf_not_after_s: 1_000,
            ca_not_after_s: 2_000,
        };
        let clock = Arc::new(ManualClock::new(0));
        let check = expired_check(expiry, clock.clone());
        clock.set(1_000_000);
        assert!(check().is_empty(), "valid through notAfter");
        clock.set(1_001_000);
        assert_eq!(check(), vec![Expired::Certificate]);
    }

    #[test]
    fn the_gauges_carry_both_kinds() {
        let metrics = NodeMetrics::new();
        publish_expiry(
            &metrics,
            CertificateExpiry {
                leaf_not_after_s: 4_102_444_800,
                ca_not_after_s: 978_307_200,
            },
        );
        let text = metrics.render();
        assert!(
            text.contains("narad_raft_tls_cert_not_after_seconds{kind=\"leaf\"} 4102444800"),
            "{text}"
        );
        assert!(
            text.contains("narad_raft_tls_cert_not_after_seconds{kind=\"ca\"} 978307200"),
            "{text}"
        );
    }
}
