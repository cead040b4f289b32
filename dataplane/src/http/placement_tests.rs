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
use crate::admin::{
    Actor, Admin, AdminFuture, AlterTopic, CreateTopic, PasswordChange, ReplicaAdmin,
};
use crate::metadata::{Grant, Member, MetadataDelta, MetadataReplica, TopicMeta, User};
use crate::testing::{LOCAL_NODE, basic};

const ROOT: (&str, &str) = ("root", "root-pw");

/// Creates topics unplaced, as the control plane applies a create; the
/// placement (the controller's next proposal) arrives when the test calls
/// [`PlacesLater::place`].
#[derive(Debug)]
struct PlacesLater {
    inner: ReplicaAdmin,
    replica: Arc<MetadataReplica>,
    placed: Mutex<Option<TopicMeta>>,
}

impl PlacesLater {
    fn apply(&self, delta: MetadataDelta) {
        let index = self.replica.view().applied_index + 1;
        self.replica.apply_delta(index, delta);
    }

    /// Applies the owners of the topic created last.
    fn place(&self) {
        let topic = self.placed.lock().take().expect("a topic was created");
        self.apply(MetadataDelta::PutTopic(topic));
    }
}

impl Admin for PlacesLater {
    fn create_topic(&self, actor: Actor, request: CreateTopic) -> AdminFuture<'_, Arc<TopicMeta>> {
        Box::pin(async move {
            let placed = self.inner.create_topic(actor, request).await?;
            let mut unplaced = (*placed).clone();
            unplaced.owners = vec![None; unplaced.owners.len()];
            self.apply(MetadataDelta::PutTopic(unplaced.clone()));
            *self.placed.lock() = Some((*placed).clone());
            Ok(Arc::new(unplaced))
        })
    }

    fn delete_topic(&self, actor: Actor, name: String) -> AdminFuture<'_, ()> {
        self.inner.delete_topic(actor, name)
    }

    fn alter_topic(
        &self,
        actor: Actor,
        name: String,
        alter: AlterTopic,
    ) -> AdminFuture<'_, Arc<TopicMeta>> {
        self.inner.alter_topic(actor, name, alter)
    }

    fn create_user(&self, actor: Actor, user: User) -> AdminFuture<'_, Arc<User>> {
        self.inner.create_user(actor, user)
    }

    fn delete_user(&self, actor: Actor, username: String) -> AdminFuture<'_, ()> {
        self.inner.delete_user(actor, username)
    }

    fn set_grants(
        &self,
        actor: Actor,
        username: String,
        grants: Vec<Grant>,
    ) -> AdminFuture<'_, Arc<User>> {
        self.inner.set_grants(actor, username, grants)
    }

    fn set_password(&self, actor: Actor, change: PasswordChange) -> AdminFuture<'_, ()> {
        self.inner.set_password(actor, change)
    }
}

/// An API over a [`PlacesLater`] admin; `alive` adds a live data node to
/// the replica's membership.
fn api_placing_later(alive: bool) -> (Api, Arc<PlacesLater>) {
    let mut admin = None;
    let api = api_with_admin(
        ApiConfig::default(),
        BATCH_BODY_BYTES_IN_FLIGHT_MAX,
        2,
        |replica| {
            let places = Arc::new(PlacesLater {
                inner: ReplicaAdmin::new(Arc::clone(&replica), LOCAL_NODE, 0x100),
                replica,
                placed: Mutex::new(None),
            });
            if alive {
                places.apply(MetadataDelta::PutMember(Member {
                    id: LOCAL_NODE,
                    alive: true,
                }));
            }
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
