//! The guarded client and the shipper against a local HTTPS target.

#![allow(clippy::unwrap_used)]

mod server;

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::Bytes;
use narad_clock::{Clock, ManualClock};
use narad_remotes::check::{check, verify_target};
use narad_remotes::chunk::{CHUNK_BYTES_START, Record, RecordRef};
use narad_remotes::client::{ClientLimits, RemoteClient, Target};
use narad_remotes::encode::LinkIdentity;
use narad_remotes::guard::AddressGuard;
use narad_remotes::ship::{Capabilities, ShipOutcome, Shipper};
use narad_remotes::state::LinkState;
use server::{PASSWORD, Reply, Running, TOPIC, USER};

const TIMEOUT: Duration = Duration::from_secs(5);

fn target(running: &Running, host: &str, password: &str) -> Target {
    Target {
        url: format!("https://{host}:{}", running.port),
        username: USER.to_owned(),
        password: password.to_owned(),
        ca_pem: Some(running.ca_pem.clone()),
        limits: ClientLimits {
            request_timeout: TIMEOUT,
            ..ClientLimits::default()
        },
    }
}

fn loopback_guard() -> AddressGuard {
    AddressGuard {
        allow_loopback: true,
        ..AddressGuard::default()
    }
}

/// A client of `running` for `localhost`, with `password`, past the
/// loopback guard.
fn loopback_client(running: &Running, password: &str, clock: Arc<dyn Clock>) -> RemoteClient {
    RemoteClient::new(
        &target(running, "localhost", password),
        loopback_guard(),
        clock,
    )
    .unwrap()
}

struct Setup {
    running: Running,
    clock: Arc<ManualClock>,
    shipper: Arc<Shipper>,
}

async fn setup_with(target_of: impl Fn(&Running) -> Target, guard: AddressGuard) -> Setup {
    let running = server::start(1_000, true).await;
    let clock = Arc::new(ManualClock::new(1_000));
    let dyn_clock: Arc<dyn Clock> = clock.clone();
    let client = RemoteClient::new(&target_of(&running), guard, Arc::clone(&dyn_clock)).unwrap();
    let shipper = Arc::new(Shipper::new(Arc::new(client), dyn_clock, false));
    Setup {
        running,
        clock,
        shipper,
    }
}

async fn setup() -> Setup {
    setup_with(
        |running| target(running, "localhost", PASSWORD),
        loopback_guard(),
    )
    .await
}

fn identity() -> LinkIdentity {
    LinkIdentity::new("link-1", "0123456789abcdef").unwrap()
}

/// `count` records of parent partition 2: keys `k0`..`k9` and every
/// fifth keyless; payloads JSON or binary.
fn slab(count: u64) -> Vec<Record> {
    (0..count)
        .map(|offset| Record {
            partition: 2,
            offset,
            key: (offset % 5 != 0).then(|| Bytes::from(format!("k{}", offset % 10))),
            payload: if offset % 2 == 0 {
                Bytes::from(format!(r#"{{"n":{offset}}}"#))
            } else {
                Bytes::from(vec![0xff, (offset % 256) as u8, b' '])
            },
            committed_at_unix_ms: 0,
        })
        .collect()
}

fn failed(outcome: &ShipOutcome) -> (LinkState, Option<RecordRef>) {
    match outcome {
        ShipOutcome::Failed {
            failure, record, ..
        } => (failure.state, *record),
        other => panic!("expected a failure, got {other:?}"),
    }
}

#[tokio::test]
async fn two_lanes_ship_every_record_once_keeping_each_keys_order() {
    let setup = setup().await;
    let records = slab(2_500);
    let outcome = setup.shipper.ship(&identity(), TOPIC, &records, 2).await;
    let ShipOutcome::Shipped(stats) = outcome else {
        panic!("not shipped: {outcome:?}");
    };
    assert_eq!(stats.records, records.len());
    let stored = setup.running.target.stored.lock().unwrap().clone();
    assert_eq!(stored.len(), records.len());
    let mut last_offset: BTreeMap<Vec<u8>, u64> = BTreeMap::new();
    let mut seen = HashSet::new();
    for message in &stored {
        let offset: u64 = message
            .idempotency_key
            .rsplit('.')
            .next()
            .unwrap()
            .parse()
            .unwrap();
        assert!(seen.insert(offset));
        let record = &records[offset as usize];
        assert_eq!(message.payload, record.payload.to_vec());
        assert_eq!(message.key, record.key.as_ref().map(|key| key.to_vec()));
        if let Some(key) = &message.key
            && let Some(previous) = last_offset.insert(key.clone(), offset)
        {
            assert!(previous < offset, "key {key:?}: {previous} after {offset}");
        }
    }
    // 2,500 records over 2 lanes in chunks of at most 1,000: at least 4
    // requests, never more than one per lane at a time.
    let received = setup.running.target.received.lock().unwrap().len();
    assert!(received >= 4, "{received}");
    assert_eq!(stats.requests as usize, received);
    assert_eq!(stats.exchanges.len(), received);
    assert!(
        stats
            .exchanges
            .iter()
            .all(|exchange| exchange.status == Some(202) && exchange.failure.is_none())
    );
    assert!(setup.running.target.max_in_flight.load(Ordering::SeqCst) <= 2);
}

#[tokio::test]
async fn a_lane_waits_for_the_remotes_in_flight_slot_and_reports_the_wait() {
    let setup = setup_with(
        |running| Target {
            limits: ClientLimits {
                max_in_flight: 1,
                ..target(running, "localhost", PASSWORD).limits
            },
            ..target(running, "localhost", PASSWORD)
        },
        loopback_guard(),
    )
    .await;
    let release = Arc::new(tokio::sync::Notify::new());
    setup
        .running
        .target
        .reply(Reply::HoldUntil(Arc::clone(&release)));
    // Two lanes of one chunk each; the remote allows one request at a
    // time, so the second lane waits while the first is held.
    let records = slab(20);
    let shipping = {
        let shipper = Arc::clone(&setup.shipper);
        let records = records.clone();
        tokio::spawn(async move { shipper.ship(&identity(), TOPIC, &records, 2).await })
    };
    setup.running.target.got_request.notified().await;
    // Time for the other lane's request to reach the target, were it let
    // go (this is no timing assertion: with the slot it never goes).
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(setup.running.target.received.lock().unwrap().len(), 1);
    setup.clock.advance(250);
    release.notify_one();
    let outcome = shipping.await.unwrap();
    let ShipOutcome::Shipped(stats) = outcome else {
        panic!("not shipped: {outcome:?}");
    };
    assert_eq!(stats.records, records.len());
    assert_eq!(setup.running.target.max_in_flight.load(Ordering::SeqCst), 1);
    let mut waits: Vec<u64> = stats.exchanges.iter().map(|e| e.waited_us).collect();
    waits.sort_unstable();
    assert_eq!(waits, [0, 250_000], "the held lane's wait, then none");
}

#[tokio::test]
async fn zstd_goes_only_to_a_target_that_takes_it() {
    let running = server::start(1_000, true).await;
    let clock: Arc<dyn Clock> = Arc::new(ManualClock::new(0));
    let client = loopback_client(&running, PASSWORD, Arc::clone(&clock));
    let shipper = Shipper::new(Arc::new(client), clock, true);
    let records: Vec<Record> = (0..50)
        .map(|offset| Record {
            partition: 0,
            offset,
            key: None,
            payload: Bytes::from(r#"{"greeting":"hello","to":"world","again":"hello"}"#),
            committed_at_unix_ms: 0,
        })
        .collect();
    let outcome = shipper.ship(&identity(), TOPIC, &records, 1).await;
    assert!(matches!(outcome, ShipOutcome::Shipped(_)), "{outcome:?}");
    assert!(
        !running.target.received.lock().unwrap()[0].zstd,
        "not before a check says so"
    );
    shipper.set_capabilities(Capabilities {
        max_messages: 1_000,
        zstd: true,
        idempotency_keys: true,
    });
    let again: Vec<Record> = records
        .iter()
        .map(|r| Record {
            offset: r.offset + 50,
            ..r.clone()
        })
        .collect();
    let ShipOutcome::Shipped(stats) = shipper.ship(&identity(), TOPIC, &again, 1).await else {
        panic!("not shipped");
    };
    assert!(running.target.received.lock().unwrap()[1].zstd);
    assert!(stats.wire_bytes * 10 <= stats.body_bytes * 9);
    assert_eq!(running.target.stored.lock().unwrap().len(), 100);
}

#[tokio::test]
async fn a_wrong_password_is_auth_failed_and_closes_the_gate() {
    let setup = setup_with(
        |running| target(running, "localhost", "not-the-password-at-all!"),
        loopback_guard(),
    )
    .await;
    let outcome = setup.shipper.ship(&identity(), TOPIC, &slab(10), 1).await;
    assert_eq!(failed(&outcome).0, LinkState::AuthFailed);
    let held = setup.shipper.ship(&identity(), TOPIC, &slab(10), 1).await;
    assert_eq!(
        held,
        ShipOutcome::Held {
            state: LinkState::AuthFailed,
            until_ms: 1_250
        }
    );
    assert!(setup.running.target.stored.lock().unwrap().is_empty());
}

#[tokio::test]
async fn a_missing_topic_is_target_missing_and_a_missing_route_is_no_batch_produce() {
    let setup = setup().await;
    let outcome = setup
        .shipper
        .ship(&identity(), "nowhere", &slab(3), 1)
        .await;
    assert_eq!(failed(&outcome).0, LinkState::TargetMissing);
    // A target whose router lacks the route answers plain text.
    let client = RemoteClient::new(
        &Target {
            url: format!("https://localhost:{}/old-broker", setup.running.port),
            ..target(&setup.running, "localhost", PASSWORD)
        },
        loopback_guard(),
        setup.clock.clone(),
    )
    .unwrap();
    let shipper = Shipper::new(Arc::new(client), setup.clock.clone(), false);
    let outcome = shipper.ship(&identity(), TOPIC, &slab(3), 1).await;
    assert_eq!(failed(&outcome).0, LinkState::NoBatchProduce);
}

#[tokio::test]
async fn a_redirect_is_refused_and_not_followed() {
    let setup = setup().await;
    setup.running.target.reply(Reply::Redirect);
    let outcome = setup.shipper.ship(&identity(), TOPIC, &slab(5), 1).await;
    assert_eq!(failed(&outcome).0, LinkState::RedirectRefused);
    let received = setup.running.target.received.lock().unwrap().clone();
    assert_eq!(received.len(), 1);
    assert!(received.iter().all(|request| request.topic == TOPIC));
}

#[tokio::test]
async fn a_refused_record_names_its_parent_partition_and_offset() {
    let setup = setup().await;
    setup.running.target.reply(Reply::Status(
        400,
        "message 2: schema: /n: expected integer",
        None,
    ));
    let records = slab(20);
    let outcome = setup.shipper.ship(&identity(), TOPIC, &records, 1).await;
    assert_eq!(
        failed(&outcome),
        (
            LinkState::RejectedRecord,
            Some(RecordRef {
                partition: 2,
                offset: 2
            })
        )
    );
}

#[tokio::test]
async fn a_429_holds_the_remote_for_its_retry_after() {
    let setup = setup().await;
    setup
        .running
        .target
        .reply(Reply::Status(429, "too many requests", Some(7)));
    let outcome = setup.shipper.ship(&identity(), TOPIC, &slab(5), 1).await;
    let ShipOutcome::Failed { failure, .. } = &outcome else {
        panic!("{outcome:?}");
    };
    assert_eq!(failure.state, LinkState::Throttled);
    assert_eq!(failure.retry_after, Some(Duration::from_secs(7)));
    let ShipOutcome::Failed { stats, .. } = &outcome else {
        unreachable!()
    };
    assert_eq!(stats.exchanges[0].status, Some(429));
    assert_eq!(stats.exchanges[0].failure, Some(LinkState::Throttled));
    let held = setup.shipper.ship(&identity(), TOPIC, &slab(5), 1).await;
    assert_eq!(
        held,
        ShipOutcome::Held {
            state: LinkState::Throttled,
            until_ms: 1_000 + 7_000
        }
    );
    setup.clock.advance(7_000);
    let probe = setup.shipper.ship(&identity(), TOPIC, &slab(5), 1).await;
    assert!(matches!(probe, ShipOutcome::Shipped(_)), "{probe:?}");
}

#[tokio::test]
async fn a_timeout_halves_the_chunk_limit_and_a_resend_carries_the_same_idempotency_keys() {
    let setup = setup().await;
    setup.running.target.reply(Reply::StoreThenHang);
    let records = slab(300);
    let shipping = {
        let shipper = Arc::clone(&setup.shipper);
        let records = records.clone();
        tokio::spawn(async move { shipper.ship(&identity(), TOPIC, &records, 1).await })
    };
    setup.running.target.got_request.notified().await;
    setup.clock.advance(TIMEOUT.as_millis() as u64);
    let outcome = shipping.await.unwrap();
    let ShipOutcome::Failed { failure, .. } = &outcome else {
        panic!("{outcome:?}");
    };
    assert_eq!(failure.state, LinkState::Unavailable);
    assert!(failure.timed_out);
    assert_eq!(setup.shipper.chunk_bytes_limit(), CHUNK_BYTES_START / 2);

    // The caller resends the same slab: same keys, stored once.
    let resent = setup.shipper.ship(&identity(), TOPIC, &records, 1).await;
    assert!(matches!(resent, ShipOutcome::Shipped(_)), "{resent:?}");
    let received = setup.running.target.received.lock().unwrap().clone();
    assert_eq!(received.len(), 2);
    let keys = |index: usize| -> Vec<String> {
        received[index]
            .messages
            .iter()
            .map(|message| message.idempotency_key.clone())
            .collect()
    };
    assert_eq!(keys(0), keys(1));
    assert_eq!(
        setup.running.target.stored.lock().unwrap().len(),
        records.len()
    );
}

#[tokio::test]
async fn the_guard_refuses_loopback_by_name_and_by_address_before_connecting() {
    for host in ["localhost", "127.0.0.1"] {
        let setup = setup_with(
            |running| target(running, host, PASSWORD),
            AddressGuard::default(),
        )
        .await;
        let outcome = setup.shipper.ship(&identity(), TOPIC, &slab(3), 1).await;
        let ShipOutcome::Failed { failure, .. } = &outcome else {
            panic!("{outcome:?}");
        };
        assert_eq!(failure.state, LinkState::DestinationRefused, "{host}");
        assert!(
            failure.detail.contains("loopback"),
            "{host}: {}",
            failure.detail
        );
        assert_eq!(
            setup.running.target.connections.load(Ordering::SeqCst),
            0,
            "{host}"
        );
    }
}

#[tokio::test]
async fn a_server_certificate_outside_the_trust_is_tls_failed() {
    let setup = setup_with(
        |running| Target {
            ca_pem: None,
            ..target(running, "localhost", PASSWORD)
        },
        loopback_guard(),
    )
    .await;
    let outcome = setup.shipper.ship(&identity(), TOPIC, &slab(3), 1).await;
    assert_eq!(failed(&outcome).0, LinkState::TlsFailed);
}

#[tokio::test]
async fn a_check_finds_a_current_target_with_zstd() {
    let setup = setup().await;
    let client = loopback_client(&setup.running, PASSWORD, setup.clock.clone());
    let report = check(&client, TOPIC).await;
    assert!(report.pass(), "{report:?}");
    let names: Vec<&str> = report.checks.iter().map(|check| check.name).collect();
    assert_eq!(
        names,
        [
            "reach",
            "auth",
            "topic",
            "remote_children",
            "batch_produce",
            "idempotency_keys",
            "zstd"
        ]
    );
    assert_eq!(
        report.capabilities,
        Capabilities {
            max_messages: 1_000,
            zstd: true,
            idempotency_keys: true,
        }
    );
    assert_eq!(report.target_id.as_deref(), Some("00112233aabbccdd"));
    assert!(
        setup.running.target.stored.lock().unwrap().is_empty(),
        "a check stores nothing"
    );
}

#[tokio::test]
async fn a_target_topic_with_a_remote_child_fails_the_check_and_unreadable_children_do_not() {
    let setup = setup().await;
    let client = loopback_client(&setup.running, PASSWORD, setup.clock.clone());
    let children = &setup.running.target.children;
    *children.lock().unwrap() = vec![("audit".into(), Some(false)), ("hidden".into(), None)];
    let report = check(&client, TOPIC).await;
    assert!(report.pass(), "{report:?}");
    let remote_children = &report.checks[3];
    assert_eq!(remote_children.name, "remote_children");
    assert!(
        remote_children.detail.contains("1 not readable"),
        "{remote_children:?}"
    );

    children.lock().unwrap().push(("onward".into(), Some(true)));
    let report = check(&client, TOPIC).await;
    assert!(!report.pass());
    assert_eq!(report.class(), Some(LinkState::TargetHasRemoteChildren));
    let last = report.checks.last().unwrap();
    assert_eq!(last.name, "remote_children");
    assert!(last.detail.contains("onward"), "{last:?}");
}

#[tokio::test]
async fn a_check_finds_an_older_target_without_zstd() {
    let running = server::start(100, false).await;
    let clock: Arc<dyn Clock> = Arc::new(ManualClock::new(0));
    let client = loopback_client(&running, PASSWORD, clock);
    let report = check(&client, TOPIC).await;
    assert!(report.pass(), "{report:?}");
    assert_eq!(
        report.capabilities,
        Capabilities {
            max_messages: 100,
            zstd: false,
            idempotency_keys: false,
        }
    );
    assert!(running.target.stored.lock().unwrap().is_empty());
}

#[tokio::test]
async fn a_check_classifies_a_wrong_password_and_a_missing_topic() {
    let running = server::start(1_000, true).await;
    let clock: Arc<dyn Clock> = Arc::new(ManualClock::new(0));
    let wrong = loopback_client(&running, "wrong-password-twenty-four", Arc::clone(&clock));
    let report = check(&wrong, TOPIC).await;
    assert!(!report.pass());
    assert_eq!(report.class(), Some(LinkState::AuthFailed));
    let right = loopback_client(&running, PASSWORD, clock);
    let report = check(&right, "nowhere").await;
    assert_eq!(report.class(), Some(LinkState::TargetMissing));
    assert_eq!(report.checks.last().map(|check| check.name), Some("topic"));
}

#[tokio::test]
async fn an_older_target_found_while_shipping_gets_chunks_of_one_hundred_without_keys() {
    let running = server::start(100, false).await;
    let clock: Arc<dyn Clock> = Arc::new(ManualClock::new(0));
    let client = loopback_client(&running, PASSWORD, Arc::clone(&clock));
    let shipper = Shipper::new(Arc::new(client), clock, false);
    let records = slab(250);
    let first = shipper.ship(&identity(), TOPIC, &records, 1).await;
    assert_eq!(failed(&first).0, LinkState::Unknown);
    assert_eq!(shipper.capabilities().max_messages, 100);
    let second = shipper.ship(&identity(), TOPIC, &records, 1).await;
    assert_eq!(failed(&second).0, LinkState::Unknown);
    assert!(!shipper.capabilities().idempotency_keys);
    let third = shipper.ship(&identity(), TOPIC, &records, 1).await;
    assert!(matches!(third, ShipOutcome::Shipped(_)), "{third:?}");
    let received = running.target.received.lock().unwrap().clone();
    assert!(received.iter().all(|request| request.messages.len() <= 100));
    assert_eq!(
        received.iter().map(|r| r.messages.len()).sum::<usize>(),
        250
    );
}

#[tokio::test]
async fn the_periodic_look_finds_a_replaced_missing_or_refusing_target() {
    let setup = setup().await;
    let client = loopback_client(&setup.running, PASSWORD, setup.clock.clone());
    let attached = "00112233aabbccdd";
    assert_eq!(verify_target(&client, TOPIC, Some(attached)).await, Ok(()));
    // A link attached without reading the target's id only checks it is
    // there.
    assert_eq!(verify_target(&client, TOPIC, None).await, Ok(()));
    let replaced = verify_target(&client, TOPIC, Some("ffeeddccbbaa9988"))
        .await
        .unwrap_err();
    assert_eq!(replaced.state, LinkState::TargetReplaced);
    assert!(replaced.detail.contains(attached), "{replaced:?}");
    let missing = verify_target(&client, "nowhere", None).await.unwrap_err();
    assert_eq!(missing.state, LinkState::TargetMissing);
    let wrong = loopback_client(
        &setup.running,
        "not-the-password-at-all!",
        setup.clock.clone(),
    );
    let refused = verify_target(&wrong, TOPIC, None).await.unwrap_err();
    assert_eq!(refused.state, LinkState::AuthFailed);
    assert!(
        setup.running.target.received.lock().unwrap().is_empty(),
        "the look sends no batch"
    );
}
