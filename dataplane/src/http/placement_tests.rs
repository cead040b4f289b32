//! A create answers once the controller placed the new topic's partitions,
//! so a client's first produce or replay after its `201` finds them owned.

use std::sync::Arc;

use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use parking_lot::Mutex;

use super::ApiConfig;
use super::body::BATCH_BODY_BYTES_IN_FLIGHT_MAX;
use super::tests::{Api, api_with_admin, send};
use super::topics::CREATE_PLACEMENT_WAIT;
use crate::admin::{Admin, AdminFuture};
use crate::metadata::MetadataReplica;
use crate::testing::{LOCAL_NODE, assign, basic, mark_dead};
use narad_meta::Command;

const ROOT: (&str, &str) = ("root", "root-pw");

/// Applies creates unplaced, as the control plane applies a create; the
/// placement (the controller's next proposal) arrives when the test calls
/// [`PlacesLater::place`].
#[derive(Debug)]
struct PlacesLater {
    replica: Arc<MetadataReplica>,
    created: Mutex<Option<String>>,
}

impl PlacesLater {
    /// Places every partition of the topic created last on this node.
    fn place(&self) {
        let name = self.created.lock().take().expect("a topic was created");
        let partitions = self.replica.topic_meta(&name).expect("created").partitions;
        let owners: Vec<(u32, u64)> = (0..partitions).map(|p| (p, LOCAL_NODE)).collect();
        assign(&self.replica, &name, &owners);
    }
}

impl Admin for PlacesLater {
    fn propose(&self, command: Command) -> AdminFuture<'_, ()> {
        Box::pin(async move {
            if let Command::CreateTopic(create) = &command {
                *self.created.lock() = Some(create.name.clone());
            }
            self.replica.apply_next(&command)?;
            Ok(())
        })
    }
}

/// An API over a [`PlacesLater`] admin; unless `alive`, the replica's only
/// data node is marked dead.
fn api_placing_later(alive: bool) -> (Api, Arc<PlacesLater>) {
    let mut admin = None;
    let api = api_with_admin(
        ApiConfig::default(),
        BATCH_BODY_BYTES_IN_FLIGHT_MAX,
        2,
        |replica| {
            if !alive {
                mark_dead(&replica, LOCAL_NODE);
            }
            let places = Arc::new(PlacesLater {
                replica,
                created: Mutex::new(None),
            });
            admin = Some(Arc::clone(&places));
            places
        },
    );
    (api, admin.expect("the admin was built"))
}

fn create(name: &str) -> Request<Body> {
    Request::post("/v1/topics")
        .header(header::AUTHORIZATION, basic(ROOT.0, ROOT.1))
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(format!(r#"{{"name":"{name}"}}"#)))
        .expect("request")
}

fn owners(api: &Api, name: &str) -> Vec<Option<u64>> {
    let topic = api.state.replica.topic_meta(name).expect("topic");
    topic.owners.clone()
}

#[tokio::test]
async fn a_create_answers_only_after_its_partitions_are_placed() {
    let (api, admin) = api_placing_later(true);
    let answer = tokio::spawn({
        let router = api.router.clone();
        async move {
            let api_router = router;
            tower::ServiceExt::oneshot(api_router, create("ledger"))
                .await
                .expect("infallible")
                .status()
        }
    });
    // The create applied unplaced and waits on the replica.
    while api.state.replica.topic_meta("ledger").is_none() {
        tokio::task::yield_now().await;
    }
    for _ in 0..100 {
        tokio::task::yield_now().await;
    }
    assert!(!answer.is_finished(), "answered before placement");
    assert_eq!(owners(&api, "ledger"), vec![None; 3]);
    admin.place();
    assert_eq!(answer.await.expect("joined"), StatusCode::CREATED);
    assert!(owners(&api, "ledger").iter().all(Option::is_some));
}

#[tokio::test(start_paused = true)]
async fn a_create_that_is_never_placed_answers_after_the_placement_wait() {
    let (api, _admin) = api_placing_later(true);
    let started = tokio::time::Instant::now();
    let answer = send(&api, create("ledger")).await;
    assert_eq!(answer.status, StatusCode::CREATED);
    assert_eq!(started.elapsed(), CREATE_PLACEMENT_WAIT);
    assert_eq!(owners(&api, "ledger"), vec![None; 3]);
}

#[tokio::test(start_paused = true)]
async fn a_create_without_a_live_data_node_answers_at_once() {
    let (api, _admin) = api_placing_later(false);
    let started = tokio::time::Instant::now();
    let answer = send(&api, create("ledger")).await;
    assert_eq!(answer.status, StatusCode::CREATED);
    assert_eq!(started.elapsed(), std::time::Duration::ZERO);
}
