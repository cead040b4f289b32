//! HTTP tests of the cluster administration routes (spec §1.9) and of a
//! draining node's produce refusal (wire contract §7.2).
//!
//! The test replica holds node 1 (this node, owner of every partition of
//! its four topics); tests register other members and moves as they need.
//! Node status over node RPC runs on loopback QUIC; a member whose address
//! answers nothing costs its test the 2 s budget.

use std::net::{SocketAddr, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use bytes::Bytes;
use narad_meta::{Command, CompleteMove, MoveTarget, RemoveMember, SetDraining, SetMoveTargets};
use narad_protocol::commit::is_unsupported_operation;
use narad_protocol::{CallError, Lane, Node, Opcode};
use serde_json::Value;

use super::ApiConfig;
use super::tests::{ALICE, Answer, Api, api_with, api_with_admin, produce_request, request, send};
use crate::admin::{Admin, AdminError, AdminFuture};
use crate::status::{MoveReports, MoveWorkerStatus};
use crate::testing::{apply, attach_forwarder, mark_dead, register, status_rpc, wal_records};
use crate::topology::{NodeId, member_id};

const ROOT: (&str, &str) = ("root", "root-pw");
const BOB: (&str, &str) = ("bob", "bob-pw");

/// This node, in the test replica.
const LOCAL: NodeId = 1;

/// Turns a hang into a failure; never a timing assertion.
const CEILING: Duration = Duration::from_secs(30);

const DRAINING_TEXT: &str =
    "this node is being decommissioned and takes no new produce; send it to another node";

fn api() -> Api {
    api_with(ApiConfig::default())
}

fn json(answer: &Answer) -> Value {
    serde_json::from_str(&answer.body).unwrap_or_else(|error| {
        panic!("a JSON body ({error}): {:?}", answer.body);
    })
}

async fn as_root(api: &Api, method: &str, uri: &str) -> Answer {
    send(api, request(method, uri, ROOT, "")).await
}

/// Every cluster route, as (method, path) with names the tests register.
const ROUTES: [(&str, &str); 7] = [
    ("GET", "/v1/cluster/members"),
    ("GET", "/v1/cluster/members?detail=true"),
    ("GET", "/v1/cluster/moves"),
    ("POST", "/v1/cluster/members/2/decommission"),
    ("DELETE", "/v1/cluster/members/2/decommission"),
    ("POST", "/v1/cluster/members/2/forget"),
    ("POST", "/v1/cluster/moves/orders/0/abort"),
];

fn member(body: &Value, id: &str) -> Value {
    body["members"]
        .as_array()
        .expect("members")
        .iter()
        .find(|member| member["id"] == id)
        .cloned()
        .unwrap_or_else(|| panic!("no member {id} in {body}"))
}

fn codes(blocks: &Value) -> Vec<String> {
    blocks
        .as_array()
        .expect("a list of blocks")
        .iter()
        .map(|block| block["code"].as_str().expect("code").to_owned())
        .collect()
}

fn drain(api: &Api, node: NodeId, draining: bool) {
    apply(
        &api.state.replica,
        Command::SetDraining(SetDraining {
            id: member_id(node),
            draining,
        }),
    );
}

/// Sets a move of `topic`'s `partition` from its owner `from` to `to`.
fn set_move(api: &Api, topic: &str, partition: u32, from: NodeId, to: NodeId) {
    let id = api
        .state
        .replica
        .view()
        .metastore
        .topic(topic)
        .expect("topic")
        .id
        .clone();
    let moves = vec![MoveTarget {
        partition,
        owner: member_id(from),
        target: member_id(to),
    }];
    apply(
        &api.state.replica,
        Command::SetMoveTargets(SetMoveTargets {
            topic: topic.to_owned(),
            id,
            moves,
        }),
    );
}

fn target_of(api: &Api, topic: &str, partition: u32) -> Option<String> {
    api.state
        .replica
        .view()
        .metastore
        .assignment(topic, partition)
        .and_then(|assignment| assignment.target.clone())
}

fn applied_index(api: &Api) -> u64 {
    api.state.replica.view().applied_index
}

fn is_draining(api: &Api, node: NodeId) -> bool {
    api.state
        .replica
        .view()
        .metastore
        .member(&member_id(node))
        .is_some_and(|member| member.draining)
}

// ---- Authorization ----

#[tokio::test]
async fn every_cluster_route_answers_401_without_credentials() {
    let api = api();
    register(&api.state.replica, 2);
    for (method, uri) in ROUTES {
        let anonymous = Request::builder()
            .method(method)
            .uri(uri)
            .header("x-narad-client", "cluster-tests")
            .body(Body::empty())
            .expect("request");
        let answer = send(&api, anonymous).await;
        assert_eq!(answer.status, StatusCode::UNAUTHORIZED, "{method} {uri}");
        assert_eq!(
            answer.headers[header::WWW_AUTHENTICATE],
            r#"Basic realm="narad""#
        );
    }
}

#[tokio::test]
async fn every_cluster_route_answers_403_to_a_user_who_is_not_an_admin() {
    let api = api();
    register(&api.state.replica, 2);
    for who in [BOB, ALICE] {
        for (method, uri) in ROUTES {
            let answer = send(&api, request(method, uri, who, "")).await;
            assert_eq!(answer.status, StatusCode::FORBIDDEN, "{method} {uri}");
        }
    }
    assert!(
        !is_draining(&api, 2),
        "a refused decommission changed nothing"
    );
}

#[tokio::test]
async fn with_security_off_anyone_administers_the_cluster() {
    let api = api_with(ApiConfig {
        security: false,
        ..ApiConfig::default()
    });
    register(&api.state.replica, 2);
    let listing = Request::get("/v1/cluster/members")
        .body(Body::empty())
        .expect("request");
    assert_eq!(send(&api, listing).await.status, StatusCode::OK);
    let decommission = Request::post("/v1/cluster/members/2/decommission")
        .header("x-narad-client", "cluster-tests")
        .body(Body::empty())
        .expect("request");
    assert_eq!(
        send(&api, decommission).await.status,
        StatusCode::NO_CONTENT
    );
    assert!(is_draining(&api, 2));
}

// ---- GET /v1/cluster/members ----

#[tokio::test]
async fn members_are_listed_in_id_order_with_their_holdings() {
    let api = api();
    register(&api.state.replica, 2);
    register(&api.state.replica, 10);
    set_move(&api, "orders", 0, LOCAL, 2);
    set_move(&api, "orders", 1, LOCAL, 10);
    let answer = as_root(&api, "GET", "/v1/cluster/members").await;
    assert_eq!(answer.status, StatusCode::OK);
    let body = json(&answer);
    let ids: Vec<&str> = body["members"]
        .as_array()
        .expect("members")
        .iter()
        .map(|member| member["id"].as_str().expect("id"))
        .collect();
    assert_eq!(ids, ["1", "10", "2"]);
    let local = member(&body, "1");
    assert_eq!(local["addr"], "node-1:http");
    assert_eq!(local["status"], "alive");
    assert_eq!(local["draining"], false);
    assert_eq!(local["owned_partitions"], 12, "four topics of three");
    assert_eq!(local["outbound_moves"], 2);
    assert_eq!(local["voter"], false);
    assert_eq!(local["leader"], false);
    assert!(local["heartbeat_age_seconds"].as_f64().expect("seconds") >= 0.0);
    assert_eq!(local["decommission_blocked"], serde_json::json!([]));
    assert!(local.get("node_status").is_none() && local.get("status_error").is_none());
    let receiver = member(&body, "2");
    assert_eq!(receiver["owned_partitions"], 0);
    assert_eq!(receiver["outbound_moves"], 0);
}

#[tokio::test]
async fn a_dead_draining_owner_lists_the_metastores_blocks() {
    let api = api();
    register(&api.state.replica, 2);
    crate::testing::topic(&api.state.replica, "stuck", 0xf1, 3, 2);
    drain(&api, 2, true);
    mark_dead(&api.state.replica, 2);
    let body = json(&as_root(&api, "GET", "/v1/cluster/members").await);
    let stuck = member(&body, "2");
    assert_eq!(stuck["status"], "dead");
    assert_eq!(stuck["draining"], true);
    assert_eq!(codes(&stuck["decommission_blocked"]), ["owner_dead"]);
    let block = &stuck["decommission_blocked"][0];
    assert!(
        block["message"]
            .as_str()
            .is_some_and(|text| !text.is_empty())
    );
}

#[tokio::test]
async fn detail_reports_this_nodes_own_status() {
    let api = api();
    let answer = as_root(&api, "GET", "/v1/cluster/members?detail=true").await;
    assert_eq!(answer.status, StatusCode::OK);
    let status = &member(&json(&answer), "1")["node_status"];
    assert_eq!(status["draining"], false);
    assert_eq!(status["produce_in_flight"], 0);
    assert_eq!(status["dispatch_backlog"], 0);
    assert_eq!(
        status["quarantine"],
        serde_json::json!({"copies": 0, "bytes": 0, "list": []})
    );
    assert_eq!(status["moves"], serde_json::json!([]));
}

#[tokio::test]
async fn detail_adds_the_backlog_block_of_a_draining_node_with_records_left() {
    let api = api();
    let produced = send(
        &api,
        produce_request("/v1/topics/orders/produce", ALICE, "x"),
    )
    .await;
    assert_eq!(produced.status, StatusCode::ACCEPTED);
    drain(&api, LOCAL, true);
    let body = json(&as_root(&api, "GET", "/v1/cluster/members?detail=true").await);
    let local = member(&body, "1");
    assert_eq!(local["node_status"]["draining"], true);
    assert_eq!(local["node_status"]["dispatch_backlog"], 1);
    assert!(
        codes(&local["decommission_blocked"]).contains(&"dispatch_backlog".to_owned()),
        "{local}"
    );
    // Without detail the backlog is not known, so not claimed.
    let plain = json(&as_root(&api, "GET", "/v1/cluster/members").await);
    assert!(
        !codes(&member(&plain, "1")["decommission_blocked"])
            .contains(&"dispatch_backlog".to_owned())
    );
}

#[tokio::test]
async fn detail_without_node_rpc_gives_other_members_a_status_error() {
    let api = api();
    register(&api.state.replica, 2);
    drain(&api, 2, true);
    let body = json(&as_root(&api, "GET", "/v1/cluster/members?detail=true").await);
    let other = member(&body, "2");
    assert!(other.get("node_status").is_none());
    assert_eq!(
        other["status_error"],
        "node RPC is not running on this node"
    );
    assert_eq!(
        codes(&other["decommission_blocked"]),
        ["node_status_unavailable"]
    );
}

#[tokio::test]
async fn detail_must_be_true_or_false() {
    let api = api();
    for uri in [
        "/v1/cluster/members?detail=yes",
        "/v1/cluster/moves?detail=2",
        "/v1/cluster/members?detail=true&detail=false",
    ] {
        let answer = as_root(&api, "GET", uri).await;
        assert_eq!(answer.status, StatusCode::BAD_REQUEST, "{uri}");
    }
    let answer = as_root(&api, "GET", "/v1/cluster/members?detail=false").await;
    assert!(member(&json(&answer), "1").get("node_status").is_none());
}

// ---- Node status over node RPC ----

/// This node's API with node RPC: member 2 is served by another node's
/// status service (which reports 5 produces in flight), member 3 sits at a
/// socket that never answers, and member 4 has no known address.
struct Rpc {
    api: Api,
    transport: Arc<Node>,
    other: SocketAddr,
    _other_transport: Node,
    _other_api: Api,
    _silent: UdpSocket,
}

fn with_rpc() -> Rpc {
    let other_api = api();
    other_api
        .state
        .status
        .produces_in_flight
        .store(5, Ordering::Relaxed);
    let other = status_rpc(&other_api.state.status);
    let other_addr = other.local_addr();
    let silent = UdpSocket::bind(SocketAddr::from(([127, 0, 0, 1], 0))).expect("a silent socket");
    let api = api();
    for node in [2, 3, 4] {
        register(&api.state.replica, node);
    }
    let peers = [(2, other_addr), (3, silent.local_addr().expect("address"))];
    let transport = attach_forwarder(&api.state, &peers);
    Rpc {
        api,
        transport,
        other: other_addr,
        _other_transport: other,
        _other_api: other_api,
        _silent: silent,
    }
}

#[tokio::test]
async fn detail_asks_other_nodes_over_rpc_and_names_those_that_did_not_answer() {
    let rpc = with_rpc();
    let answer = tokio::time::timeout(
        CEILING,
        as_root(&rpc.api, "GET", "/v1/cluster/members?detail=true"),
    )
    .await
    .expect("answered within the ceiling");
    let body = json(&answer);
    assert_eq!(member(&body, "1")["node_status"]["produce_in_flight"], 0);
    assert_eq!(member(&body, "2")["node_status"]["produce_in_flight"], 5);
    let silent = member(&body, "3");
    assert!(silent.get("node_status").is_none());
    let error = silent["status_error"].as_str().expect("status_error");
    assert!(error.starts_with("no answer"), "{error}");
    assert_eq!(
        member(&body, "4")["status_error"],
        "no node RPC address is known for it"
    );
}

#[tokio::test]
async fn a_node_status_request_with_trailing_bytes_is_an_unsupported_operation() {
    let rpc = with_rpc();
    let request = narad_protocol::Request::new(Opcode::NODE_STATUS, Bytes::from_static(&[1, 1, 0]));
    let refused = rpc
        .transport
        .call_with_timeout(rpc.other, Lane::Control, request, CEILING)
        .await;
    match refused {
        Err(CallError::Rejected(error)) => {
            assert!(is_unsupported_operation(&error), "{error}");
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
}

// ---- GET /v1/cluster/moves ----

#[tokio::test]
async fn moves_list_each_move_with_its_members_states() {
    let api = api();
    register(&api.state.replica, 2);
    register(&api.state.replica, 3);
    set_move(&api, "orders", 0, LOCAL, 2);
    set_move(&api, "typed", 2, LOCAL, 3);
    mark_dead(&api.state.replica, 3);
    let answer = as_root(&api, "GET", "/v1/cluster/moves").await;
    assert_eq!(answer.status, StatusCode::OK);
    let body = json(&answer);
    assert_eq!(
        body["moves"][0],
        serde_json::json!({
            "topic": "orders", "partition": 0, "from": "1", "to": "2",
            "from_status": "alive", "to_status": "alive",
        })
    );
    let to_dead = &body["moves"][1];
    assert_eq!(to_dead["topic"], "typed");
    assert_eq!(to_dead["to_status"], "dead");
    assert_eq!(to_dead["blocked"], "target_dead");
    assert_eq!(body["moves"].as_array().map(Vec::len), Some(2));
}

#[tokio::test]
async fn a_move_from_a_dead_owner_is_blocked_by_its_source() {
    let api = api();
    register(&api.state.replica, 2);
    register(&api.state.replica, 3);
    crate::testing::topic(&api.state.replica, "far", 0xf2, 3, 2);
    set_move(&api, "far", 0, 2, 3);
    mark_dead(&api.state.replica, 2);
    let body = json(&as_root(&api, "GET", "/v1/cluster/moves").await);
    let step = &body["moves"][0];
    assert_eq!(step["from_status"], "dead");
    assert_eq!(step["to_status"], "alive");
    assert_eq!(step["blocked"], "source_dead");
}

#[derive(Debug)]
struct Workers(Vec<MoveWorkerStatus>);

impl MoveReports for Workers {
    fn moves(&self) -> Vec<MoveWorkerStatus> {
        self.0.clone()
    }
}

fn worker(topic: &str, partition: u32) -> MoveWorkerStatus {
    MoveWorkerStatus {
        topic: topic.to_owned(),
        partition,
        source: "2".into(),
        target: "1".into(),
        started_at_ms: 1_700_000_000_000,
        phase: "copying".into(),
        attempts: 1,
        last_error: None,
        copied_bytes: 512,
        blocked: None,
    }
}

#[tokio::test]
async fn detail_shows_the_targets_worker_or_why_it_could_not_be_asked() {
    let api = api();
    register(&api.state.replica, 2);
    crate::testing::topic(&api.state.replica, "inbound", 0xf3, 3, 2);
    set_move(&api, "inbound", 1, 2, LOCAL);
    set_move(&api, "orders", 2, LOCAL, 2);
    let workers = Workers(vec![worker("inbound", 0), worker("inbound", 1)]);
    assert!(api.state.status.plug_move_reports(Arc::new(workers)));
    let body = json(&as_root(&api, "GET", "/v1/cluster/moves?detail=true").await);
    let inbound = &body["moves"][0];
    assert_eq!(inbound["topic"], "inbound");
    assert_eq!(
        inbound["worker"],
        serde_json::json!({
            "topic": "inbound", "partition": 1, "source": "2", "target": "1",
            "started_at_ms": 1_700_000_000_000_u64, "phase": "copying",
            "attempts": 1, "copied_bytes": 512,
        })
    );
    assert!(inbound.get("worker_error").is_none());
    let outbound = &body["moves"][1];
    assert_eq!(outbound["topic"], "orders");
    assert!(outbound.get("worker").is_none());
    assert_eq!(
        outbound["worker_error"],
        "node RPC is not running on this node"
    );
    // The same workers in the member listing.
    let members = json(&as_root(&api, "GET", "/v1/cluster/members?detail=true").await);
    let moves = &member(&members, "1")["node_status"]["moves"];
    assert_eq!(moves.as_array().map(Vec::len), Some(2));
}

// ---- POST/DELETE /v1/cluster/members/{id}/decommission ----

#[tokio::test]
async fn decommission_marks_the_member_draining() {
    let api = api();
    register(&api.state.replica, 2);
    let answer = as_root(&api, "POST", "/v1/cluster/members/2/decommission").await;
    assert_eq!(answer.status, StatusCode::NO_CONTENT);
    assert_eq!(answer.body, "");
    assert!(is_draining(&api, 2));
}

#[tokio::test]
async fn decommission_of_an_unknown_member_is_404() {
    let api = api();
    for method in ["POST", "DELETE"] {
        let answer = as_root(&api, method, "/v1/cluster/members/9/decommission").await;
        assert_eq!(answer.status, StatusCode::NOT_FOUND, "{method}");
        assert_eq!(answer.body, "{\"error\":\"member not found\"}\n");
    }
}

#[tokio::test]
async fn a_decommission_that_could_never_finish_is_409_and_changes_nothing() {
    let api = api();
    let before = applied_index(&api);
    // Node 1 owns partitions and no other node could take them.
    let answer = as_root(&api, "POST", "/v1/cluster/members/1/decommission").await;
    assert_eq!(answer.status, StatusCode::CONFLICT);
    assert!(
        answer.error().contains("no_receivers"),
        "{}",
        answer.error()
    );
    assert!(!is_draining(&api, LOCAL));
    assert_eq!(applied_index(&api), before, "nothing was proposed");
}

#[tokio::test]
async fn a_dry_run_gives_the_verdict_and_changes_nothing() {
    let api = api();
    register(&api.state.replica, 2);
    set_move(&api, "orders", 0, LOCAL, 2);
    let before = applied_index(&api);
    let refused = as_root(
        &api,
        "POST",
        "/v1/cluster/members/1/decommission?dry_run=true",
    )
    .await;
    assert_eq!(refused.status, StatusCode::OK);
    // Node 2 is a receiver now, so node 1 could drain.
    let verdict = json(&refused);
    assert_eq!(verdict["member"], "1");
    assert_eq!(verdict["would_decommission"], true);
    assert_eq!(verdict["reasons"], serde_json::json!([]));
    assert_eq!(verdict["voter"], false);
    assert_eq!(verdict["owned_partitions"], 12);
    assert_eq!(verdict["inbound_moves"], 0);
    let target = json(
        &as_root(
            &api,
            "POST",
            "/v1/cluster/members/2/decommission?dry_run=true",
        )
        .await,
    );
    assert_eq!(target["would_decommission"], true);
    assert_eq!(target["inbound_moves"], 1);
    assert_eq!(
        target["reasons"],
        serde_json::json!([{
            "code": "move_target",
            "message": narad_meta::DecommissionBlock::MoveTarget.message(),
            "permanent": false,
        }])
    );
    assert_eq!(applied_index(&api), before, "a dry run proposes nothing");
    assert!(!is_draining(&api, LOCAL) && !is_draining(&api, 2));
}

#[tokio::test]
async fn a_dry_run_names_the_reasons_that_refuse_it() {
    let api = api();
    let verdict = json(
        &as_root(
            &api,
            "POST",
            "/v1/cluster/members/1/decommission?dry_run=true",
        )
        .await,
    );
    assert_eq!(verdict["would_decommission"], false);
    assert_eq!(verdict["reasons"][0]["code"], "no_receivers");
    assert_eq!(verdict["reasons"][0]["permanent"], true);
}

#[tokio::test]
async fn cancel_clears_the_draining_mark() {
    let api = api();
    register(&api.state.replica, 2);
    drain(&api, 2, true);
    let answer = as_root(&api, "DELETE", "/v1/cluster/members/2/decommission").await;
    assert_eq!(answer.status, StatusCode::NO_CONTENT);
    assert!(!is_draining(&api, 2));
}

#[tokio::test]
async fn a_dry_run_cancel_is_400_and_changes_nothing() {
    let api = api();
    register(&api.state.replica, 2);
    drain(&api, 2, true);
    let answer = as_root(
        &api,
        "DELETE",
        "/v1/cluster/members/2/decommission?dry_run=true",
    )
    .await;
    assert_eq!(answer.status, StatusCode::BAD_REQUEST);
    assert!(is_draining(&api, 2));
}

// ---- POST /v1/cluster/members/{id}/forget ----

#[tokio::test]
async fn forget_is_409_for_a_member_404_for_an_unknown_id_and_501_for_a_removed_one() {
    let api = api();
    let member = as_root(&api, "POST", "/v1/cluster/members/1/forget").await;
    assert_eq!(member.status, StatusCode::CONFLICT);
    let unknown = as_root(&api, "POST", "/v1/cluster/members/9/forget").await;
    assert_eq!(unknown.status, StatusCode::NOT_FOUND);
    assert!(unknown.error().starts_with("member not found"));
    register(&api.state.replica, 5);
    drain(&api, 5, true);
    apply(
        &api.state.replica,
        Command::RemoveMember(RemoveMember { id: member_id(5) }),
    );
    let removed = as_root(&api, "POST", "/v1/cluster/members/5/forget").await;
    assert_eq!(removed.status, StatusCode::NOT_IMPLEMENTED);
    assert!(
        removed
            .error()
            .contains("control-plane servers are changed through the control nodes"),
        "{}",
        removed.error()
    );
}

// ---- POST /v1/cluster/moves/{topic}/{partition}/abort ----

#[tokio::test]
async fn abort_clears_the_current_move_and_answers_202() {
    let api = api();
    register(&api.state.replica, 2);
    set_move(&api, "orders", 0, LOCAL, 2);
    let answer = as_root(&api, "POST", "/v1/cluster/moves/orders/0/abort").await;
    assert_eq!(answer.status, StatusCode::ACCEPTED);
    let body = json(&answer);
    assert_eq!(
        body["move"],
        serde_json::json!({"topic": "orders", "partition": 0, "from": "1", "to": "2"})
    );
    assert!(
        body["note"]
            .as_str()
            .is_some_and(|note| note.contains("node 2 stops copying"))
    );
    assert_eq!(target_of(&api, "orders", 0), None);
}

#[tokio::test]
async fn abort_naming_the_current_target_clears_it() {
    let api = api();
    register(&api.state.replica, 2);
    set_move(&api, "orders", 1, LOCAL, 2);
    let answer = as_root(&api, "POST", "/v1/cluster/moves/orders/1/abort?target=2").await;
    assert_eq!(answer.status, StatusCode::ACCEPTED);
    assert_eq!(target_of(&api, "orders", 1), None);
}

#[tokio::test]
async fn abort_naming_another_target_is_409_and_keeps_the_move() {
    let api = api();
    register(&api.state.replica, 2);
    set_move(&api, "orders", 0, LOCAL, 2);
    let answer = as_root(&api, "POST", "/v1/cluster/moves/orders/0/abort?target=3").await;
    assert_eq!(answer.status, StatusCode::CONFLICT);
    assert!(
        answer.error().contains("is moving to"),
        "{}",
        answer.error()
    );
    assert_eq!(target_of(&api, "orders", 0).as_deref(), Some("2"));
}

#[tokio::test]
async fn abort_without_a_move_is_409() {
    let api = api();
    let answer = as_root(&api, "POST", "/v1/cluster/moves/orders/1/abort").await;
    assert_eq!(answer.status, StatusCode::CONFLICT);
    assert_eq!(answer.error(), "partition 1 has no move in progress");
}

#[tokio::test]
async fn abort_after_the_flip_is_409() {
    let api = api();
    register(&api.state.replica, 2);
    set_move(&api, "orders", 0, LOCAL, 2);
    let id = api
        .state
        .replica
        .view()
        .metastore
        .topic("orders")
        .expect("orders")
        .id
        .clone();
    apply(
        &api.state.replica,
        Command::CompleteMove(CompleteMove {
            topic: "orders".into(),
            id,
            partition: 0,
            source: member_id(LOCAL),
            target: member_id(2),
        }),
    );
    let answer = as_root(&api, "POST", "/v1/cluster/moves/orders/0/abort?target=2").await;
    assert_eq!(answer.status, StatusCode::CONFLICT);
    assert!(
        answer.error().contains("already completed"),
        "{}",
        answer.error()
    );
}

#[tokio::test]
async fn abort_of_an_unknown_topic_is_404_and_of_a_bad_partition_400() {
    let api = api();
    let unknown = as_root(&api, "POST", "/v1/cluster/moves/nowhere/0/abort").await;
    assert_eq!(unknown.status, StatusCode::NOT_FOUND);
    assert_eq!(unknown.error(), "topic not found");
    for partition in ["x", "-1", "3"] {
        let uri = format!("/v1/cluster/moves/orders/{partition}/abort");
        let answer = as_root(&api, "POST", &uri).await;
        assert_eq!(answer.status, StatusCode::BAD_REQUEST, "{partition}");
    }
}

/// An admin whose proposals get no answer: the change may or may not
/// apply.
#[derive(Debug)]
struct Unanswered;

impl Admin for Unanswered {
    fn propose(&self, _command: Command) -> AdminFuture<'_, ()> {
        Box::pin(async {
            Err(AdminError::Unavailable(
                "control plane temporarily unavailable: the change may still be applied, read it back before retrying".into(),
            ))
        })
    }
}

#[tokio::test]
async fn abort_whose_outcome_is_unknown_is_503() {
    let api = api_with_admin(
        ApiConfig::default(),
        super::body::BATCH_BODY_BYTES_IN_FLIGHT_MAX,
        2,
        |_| Arc::new(Unanswered),
    );
    register(&api.state.replica, 2);
    set_move(&api, "orders", 0, LOCAL, 2);
    let answer = as_root(&api, "POST", "/v1/cluster/moves/orders/0/abort").await;
    assert_eq!(answer.status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(answer.error().contains("the change may still be applied"));
}

// ---- Produce on a draining node ----

#[tokio::test]
async fn a_draining_node_refuses_produce_with_503_retry_after_and_stores_nothing() {
    let api = api();
    drain(&api, LOCAL, true);
    let single = send(
        &api,
        produce_request("/v1/topics/orders/produce", ALICE, "x"),
    )
    .await;
    let batch = Request::post("/v1/topics/orders/produce/batch")
        .header(
            header::AUTHORIZATION,
            crate::testing::basic(ALICE.0, ALICE.1),
        )
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(r#"{"messages":[{"payload":"x"}]}"#))
        .expect("request");
    let batch = send(&api, batch).await;
    for answer in [single, batch] {
        assert_eq!(answer.status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(answer.error(), DRAINING_TEXT);
        assert_eq!(answer.headers[header::RETRY_AFTER], "1");
    }
    assert!(wal_records(&api.wal).is_empty(), "nothing was stored");
}

#[tokio::test]
async fn produce_is_taken_again_once_the_mark_is_cleared_and_while_another_node_drains() {
    let api = api();
    register(&api.state.replica, 2);
    drain(&api, 2, true);
    drain(&api, LOCAL, true);
    drain(&api, LOCAL, false);
    let answer = send(
        &api,
        produce_request("/v1/topics/orders/produce", ALICE, "x"),
    )
    .await;
    assert_eq!(answer.status, StatusCode::ACCEPTED);
    assert_eq!(wal_records(&api.wal).len(), 1);
}
