//! A whole data node on a simulated disk whose fdatasync fails: the WAL
//! latches, every produce after it is refused with the spec's `500
//! produce failed` even once the disk works again (a failed fsync is never
//! retried), and after a power cut and a restart everything acknowledged
//! before the failure is in its partition log and the node accepts
//! produces again.

use std::path::Path;
use std::sync::Arc;

use axum::Router;
use axum::body::{Body, to_bytes};
use axum::http::{Request, StatusCode, header};
use narad_disk::Disk;
use narad_disk::sim::{Fault, FaultError, FaultOp, SimDisk, Tear};
use tower::ServiceExt;

use crate::e2e_tests::{DATA_DIR, config, stored, wait_until};
use crate::http::router;
use crate::node::DataNode;
use crate::testing::{replica, start_node};

/// Messages acknowledged before the fault.
const BEFORE: usize = 20;
/// Produces sent after the first refusal, with the disk healthy again.
const AFTER: usize = 3;

/// One produce to `orders` through the node's router: status and body.
async fn produce(router: &Router, payload: &str) -> (StatusCode, String) {
    let request = Request::post("/v1/topics/orders/produce")
        .header(header::CONTENT_TYPE, "application/octet-stream")
        .body(Body::from(payload.to_owned()))
        .expect("request");
    let response = router.clone().oneshot(request).await.expect("infallible");
    let status = response.status();
    let body = to_bytes(response.into_body(), usize::MAX)
        .await
        .expect("body");
    (status, String::from_utf8_lossy(&body).into_owned())
}

async fn get(router: &Router, path: &str) -> String {
    let request = Request::get(path).body(Body::empty()).expect("request");
    let response = router.clone().oneshot(request).await.expect("infallible");
    let body = to_bytes(response.into_body(), usize::MAX)
        .await
        .expect("body");
    String::from_utf8_lossy(&body).into_owned()
}

fn start(disk: &Arc<dyn Disk>, replica: &Arc<crate::metadata::MetadataReplica>) -> DataNode {
    let mut config = config(Path::new(DATA_DIR), 21);
    config.api.security = false;
    start_node(Arc::clone(disk), replica, config)
}

#[test]
fn a_failed_fdatasync_latches_produces_at_500_and_keeps_what_was_acknowledged() {
    let sim = SimDisk::new(21);
    let disk: Arc<dyn Disk> = Arc::new(sim.clone());
    let replica = replica();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let node = start(&disk, &replica);
    let api = router(Arc::clone(node.api()));
    for index in 0..BEFORE {
        let (status, body) = runtime.block_on(produce(&api, &format!("before-{index}")));
        assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    }
    wait_until("dispatch of the acknowledged records", || node.drained());

    // Every fdatasync fails until the first produce is refused; then the
    // disk is healthy again, and the WAL must still refuse.
    sim.inject(Fault {
        op: FaultOp::Sync,
        nth: 0,
        error: FaultError::Eio,
        sticky: true,
    });
    let (status, body) = runtime.block_on(produce(&api, "failed"));
    sim.clear_faults();
    assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR, "{body}");
    assert!(body.contains("produce failed"), "{body}");
    for index in 0..AFTER {
        let (status, body) = runtime.block_on(produce(&api, &format!("after-{index}")));
        assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR, "latched: {body}");
        assert!(body.contains("produce failed"), "{body}");
    }
    let metrics = runtime.block_on(get(&api, "/metrics"));
    assert!(metrics.contains("narad_ingress_wal_failed 1"), "{metrics}");
    let ready = runtime.block_on(get(&api, "/readyz"));
    assert_eq!(ready, "{\"status\":\"ready\"}\n", "readiness is unaffected");

    node.abandon();
    sim.crash(Tear::LastWrite);
    let node = start(&disk, &replica);
    let api = router(Arc::clone(node.api()));
    let (status, body) = runtime.block_on(produce(&api, "restarted"));
    assert_eq!(
        status,
        StatusCode::ACCEPTED,
        "the latch ends with the process: {body}"
    );
    wait_until("dispatch after the restart", || node.drained());
    node.shutdown();

    let payloads: Vec<String> = stored(&disk, Path::new(DATA_DIR), "orders", 3)
        .into_values()
        .flatten()
        .map(|(_, payload)| String::from_utf8_lossy(&payload).into_owned())
        .collect();
    for index in 0..BEFORE {
        let expected = format!("before-{index}");
        assert!(payloads.contains(&expected), "acknowledged {expected} lost");
    }
    for index in 0..AFTER {
        let refused = format!("after-{index}");
        assert!(!payloads.contains(&refused), "{refused} was never written");
    }
    assert!(payloads.contains(&"restarted".to_owned()));
}
