//! Delivery tokens and claims (spec §3 "Cross-node consume"): a node with
//! consumes of a topic parked registers a token with each live remote owner
//! (`TokenRegister`, 30). When a record of the topic commits there, the
//! owner spends one token per record it can hold: it leases a ready record
//! for [`CLAIM_HOLD`] under a nonce only it knows, and tells the token's
//! holder (`TokenNotify`, 31). The holder's next probe of that owner
//! carries the `Claim` flag, and the owner hands it the held records as
//! ordinary leases. A hold nobody claims lapses at its deadline like any
//! lease, and the record goes to whoever asks or waits first. The re-probe
//! cadence stays as the safety net.
//!
//! - [`TokenTable`] (owner): live tokens per topic, single use.
//! - [`HoldTable`] (owner): which held records wait for which holder.
//! - [`TokenInbox`] (requester): the handler of opcode 31, the memory of
//!   which owners hold a live token of this node, and the claims owed.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use narad_protocol::consume::decode_forward_request;
use narad_protocol::{Inbound, Opcode, OperationLimit, Response, Router, RpcError, TokenNotify};
use parking_lot::Mutex;
use tokio::sync::Notify;

use crate::consume::service::{CONSUME_RECORDS_MAX, HeldRecord};
use crate::topology::NodeId;

/// Token holders one topic keeps at most on an owner; a registration past
/// it is refused `503` (the holder's re-probes still find records).
pub const TOKEN_HOLDERS_PER_TOPIC_MAX: usize = 1_024;

/// Topics with tokens one owner keeps at most.
pub const TOKEN_TOPICS_MAX: usize = 4_096;

/// Added to a parked consume's remaining wait for its token's TTL: the
/// spec's share window.
pub const TOKEN_SHARE_WINDOW: Duration = Duration::from_millis(250);

/// A registration is renewed when it has less than this left (spec:
/// re-registered within 500 ms).
pub const TOKEN_RENEW_BEFORE: Duration = Duration::from_millis(500);

/// A registration is renewed at least this often while consumes stay
/// parked (spec: at least every 5 s).
pub const TOKEN_RENEW_EVERY: Duration = Duration::from_secs(5);

/// How long an owner holds a notified record for its holder's claim. The
/// spec names no figure. 500 ms is the notification's own budget
/// ([`PROBE_BUDGET`](super::PROBE_BUDGET)): a notify that takes longer has
/// failed anyway, while notify + claim take about one round trip (~16 ms
/// measured by the spec), so the margin is wide; and a local consume that
/// arrives during a hold waits at most this long for that record.
pub const CLAIM_HOLD: Duration = Duration::from_millis(500);

/// Records held for one holder of one topic at most; a holder at the limit
/// is not notified again (its token stays live) until it claims or its
/// holds lapse.
pub const HOLDS_PER_HOLDER_MAX: usize = CONSUME_RECORDS_MAX;

/// Claims a requester keeps owed at most (topic × owner); past it a
/// notification is not turned into a claim and the hold lapses.
pub const CLAIMS_OWED_MAX: usize = 4_096;

/// Why a token was not taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TokenRefusal {
    /// The topic's holders, or the topics, are at their limit.
    Full,
}

/// The owner's live tokens: per topic, holder → expiry.
#[derive(Debug, Default)]
pub struct TokenTable {
    topics: HashMap<String, HashMap<SocketAddr, Instant>>,
}

impl TokenTable {
    /// Records (or renews) `holder`'s token for `topic` until `expires_at`.
    ///
    /// # Errors
    /// [`TokenRefusal::Full`] at the limits (expired tokens are dropped
    /// first).
    pub fn register(
        &mut self,
        topic: &str,
        holder: SocketAddr,
        expires_at: Instant,
        now: Instant,
    ) -> Result<(), TokenRefusal> {
        if !self.topics.contains_key(topic) && self.topics.len() >= TOKEN_TOPICS_MAX {
            self.topics.retain(|_, holders| {
                holders.retain(|_, expiry| *expiry > now);
                !holders.is_empty()
            });
            if self.topics.len() >= TOKEN_TOPICS_MAX {
                return Err(TokenRefusal::Full);
            }
        }
        let holders = self.topics.entry(topic.to_owned()).or_default();
        if !holders.contains_key(&holder) && holders.len() >= TOKEN_HOLDERS_PER_TOPIC_MAX {
            holders.retain(|_, expiry| *expiry > now);
            if holders.len() >= TOKEN_HOLDERS_PER_TOPIC_MAX {
                return Err(TokenRefusal::Full);
            }
        }
        holders.insert(holder, expires_at);
        Ok(())
    }

    /// The holders of live tokens of `topic`, in address order; expired
    /// tokens lapse silently.
    pub fn live_holders(&mut self, topic: &str, now: Instant) -> Vec<SocketAddr> {
        let Some(holders) = self.topics.get_mut(topic) else {
            return Vec::new();
        };
        holders.retain(|_, expiry| *expiry > now);
        let mut live: Vec<SocketAddr> = holders.keys().copied().collect();
        if live.is_empty() {
            self.topics.remove(topic);
        }
        live.sort_unstable();
        live
    }

    /// Spends `holder`'s token of `topic` (single use). Returns whether it
    /// was live; an expired one lapses.
    pub fn spend(&mut self, topic: &str, holder: SocketAddr, now: Instant) -> bool {
        let Some(holders) = self.topics.get_mut(topic) else {
            return false;
        };
        let live = holders.remove(&holder).is_some_and(|expiry| expiry > now);
        if holders.is_empty() {
            self.topics.remove(topic);
        }
        live
    }

    /// Live tokens of `topic`.
    pub fn live(&self, topic: &str, now: Instant) -> usize {
        self.topics.get(topic).map_or(0, |holders| {
            holders.values().filter(|expiry| **expiry > now).count()
        })
    }

    /// Whether `topic` has a token that has not expired.
    pub fn has_live(&self, topic: &str, now: Instant) -> bool {
        self.topics
            .get(topic)
            .is_some_and(|holders| holders.values().any(|expiry| *expiry > now))
    }
}

/// The owner's held records, per topic and holder, each with the instant
/// its hold lapses. Entries exist only for spent tokens, so the token
/// table's limits bound it, and [`HOLDS_PER_HOLDER_MAX`] each holder.
#[derive(Debug, Default)]
pub struct HoldTable {
    holds: HashMap<(String, SocketAddr), Vec<(HeldRecord, Instant)>>,
}

impl HoldTable {
    /// Keeps `held` for `holder`'s claim until `deadline` (`now` is the
    /// present, to drop lapsed entries).
    ///
    /// # Panics
    /// If the holder already has [`HOLDS_PER_HOLDER_MAX`] live holds (the
    /// caller checks [`HoldTable::has_room`] first).
    pub fn insert(
        &mut self,
        topic: &str,
        holder: SocketAddr,
        held: HeldRecord,
        now: Instant,
        deadline: Instant,
    ) {
        let key = (topic.to_owned(), holder);
        if !self.holds.contains_key(&key) {
            // Drop lapsed holders' entries now and then, not on each call.
            if self.holds.len() >= TOKEN_TOPICS_MAX {
                self.holds.retain(|_, holds| {
                    holds.retain(|(_, until)| *until > now);
                    !holds.is_empty()
                });
            }
        }
        let holds = self.holds.entry(key).or_default();
        assert!(
            holds.len() < HOLDS_PER_HOLDER_MAX,
            "a holder was given more than {HOLDS_PER_HOLDER_MAX} holds"
        );
        holds.push((held, deadline));
    }

    /// Whether `holder` may be given another hold of `topic` (lapsed holds
    /// are dropped first).
    pub fn has_room(&mut self, topic: &str, holder: SocketAddr, now: Instant) -> bool {
        let key = (topic.to_owned(), holder);
        let Some(holds) = self.holds.get_mut(&key) else {
            return true;
        };
        holds.retain(|(_, until)| *until > now);
        if holds.is_empty() {
            self.holds.remove(&key);
            return true;
        }
        holds.len() < HOLDS_PER_HOLDER_MAX
    }

    /// Takes `claimant`'s holds of `topic` that have not lapsed, oldest
    /// first.
    pub fn take(&mut self, topic: &str, claimant: SocketAddr, now: Instant) -> Vec<HeldRecord> {
        self.holds
            .remove(&(topic.to_owned(), claimant))
            .unwrap_or_default()
            .into_iter()
            .filter(|(_, until)| *until > now)
            .map(|(held, _)| held)
            .collect()
    }

    /// Live holds of `topic` for `holder` (tests, diagnostics).
    pub fn count(&self, topic: &str, holder: SocketAddr, now: Instant) -> usize {
        self.holds
            .get(&(topic.to_owned(), holder))
            .map_or(0, |holds| {
                holds.iter().filter(|(_, until)| *until > now).count()
            })
    }
}

/// The requester's side of tokens: wakes parked consumes when an owner
/// notifies, remembers which owners hold a live token of this node, and
/// which owners are owed a claim.
#[derive(Debug, Default)]
pub struct TokenInbox {
    wakers: Mutex<HashMap<String, Arc<Notify>>>,
    registered: Mutex<HashMap<(NodeId, String), Instant>>,
    /// Per topic and notifying owner's address: until when its hold lasts.
    claims: Mutex<HashMap<(String, SocketAddr), Instant>>,
    notified_total: AtomicU64,
}

impl TokenInbox {
    /// An empty inbox; route it with [`TokenInbox::route`] before the
    /// transport is bound.
    pub fn new() -> Arc<Self> {
        Arc::default()
    }

    /// `router` with opcode 31 served by this inbox.
    pub fn route(self: &Arc<Self>, router: Router) -> Router {
        let inbox = Arc::clone(self);
        router.route(
            Opcode::TOKEN_NOTIFY,
            OperationLimit::messaging(),
            move |inbound: Inbound| {
                let inbox = Arc::clone(&inbox);
                async move { inbox.handle(&inbound) }
            },
        )
    }

    fn handle(&self, inbound: &Inbound) -> Result<Response, RpcError> {
        let notify = decode_forward_request::<TokenNotify>(inbound.request.body.clone())?;
        self.notified(&notify.topic, inbound.peer, Instant::now());
        Ok(Response::no_content())
    }

    /// The owner at `owner` holds a record of `topic` for this node: the
    /// next probe of that owner claims it; tokens of the topic are spent
    /// (single use), parked consumes wake.
    pub fn notified(&self, topic: &str, owner: SocketAddr, now: Instant) {
        self.notified_total.fetch_add(1, Ordering::Relaxed);
        {
            let mut claims = self.claims.lock();
            let key = (topic.to_owned(), owner);
            if !claims.contains_key(&key) && claims.len() >= CLAIMS_OWED_MAX {
                claims.retain(|_, until| *until > now);
            }
            if claims.contains_key(&key) || claims.len() < CLAIMS_OWED_MAX {
                claims.insert(key, now + CLAIM_HOLD);
            }
        }
        self.registered
            .lock()
            .retain(|(_, registered), _| registered != topic);
        if let Some(waker) = self.wakers.lock().get(topic) {
            waker.notify_waiters();
        }
    }

    /// What parked consumes of `topic` wait on.
    pub fn waker(&self, topic: &str) -> Arc<Notify> {
        Arc::clone(self.wakers.lock().entry(topic.to_owned()).or_default())
    }

    /// Whether `node` must be asked for a token of `topic` now (none, or
    /// the one it holds lapses within 500 ms); if so, it counts as
    /// registered until `now + min(ttl, 5 s)`.
    pub fn claim_registration(
        &self,
        node: NodeId,
        topic: &str,
        ttl: Duration,
        now: Instant,
    ) -> bool {
        let mut registered = self.registered.lock();
        registered.retain(|_, until| *until > now);
        let key = (node, topic.to_owned());
        if registered
            .get(&key)
            .is_some_and(|until| *until > now + TOKEN_RENEW_BEFORE)
        {
            return false;
        }
        registered.insert(key, now + ttl.min(TOKEN_RENEW_EVERY));
        true
    }

    /// Whether a probe of `topic` at `owner` must carry the `Claim` flag:
    /// `owner` notified this node and its hold has not lapsed. The claim is
    /// owed once: the first probe takes it.
    pub fn take_claim(&self, topic: &str, owner: SocketAddr, now: Instant) -> bool {
        self.claims
            .lock()
            .remove(&(topic.to_owned(), owner))
            .is_some_and(|until| until > now)
    }

    /// Whether a claim of `topic` is owed to `owner` (without taking it).
    pub fn owes_claim(&self, topic: &str, owner: SocketAddr, now: Instant) -> bool {
        self.claims
            .lock()
            .get(&(topic.to_owned(), owner))
            .is_some_and(|until| *until > now)
    }

    /// Notifications received (tests, diagnostics).
    pub fn notified_total(&self) -> u64 {
        self.notified_total.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn holder(port: u16) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], port))
    }

    #[test]
    fn a_token_is_spent_once() {
        let now = Instant::now();
        let mut table = TokenTable::default();
        table
            .register("t", holder(1), now + Duration::from_secs(1), now)
            .expect("taken");
        assert_eq!(table.live_holders("t", now), vec![holder(1)]);
        assert!(table.spend("t", holder(1), now));
        assert!(!table.spend("t", holder(1), now));
        assert!(table.live_holders("t", now).is_empty());
    }

    #[test]
    fn an_expired_token_lapses_without_a_notification() {
        let now = Instant::now();
        let mut table = TokenTable::default();
        table
            .register("t", holder(1), now + Duration::from_millis(10), now)
            .expect("taken");
        let later = now + Duration::from_secs(1);
        assert!(!table.has_live("t", later));
        assert!(table.live_holders("t", later).is_empty());
    }

    #[test]
    fn holders_per_topic_are_bounded() {
        let now = Instant::now();
        let mut table = TokenTable::default();
        let until = now + Duration::from_secs(1);
        for port in 0..TOKEN_HOLDERS_PER_TOPIC_MAX as u16 {
            table
                .register("t", holder(port), until, now)
                .expect("taken");
        }
        assert_eq!(
            table.register("t", holder(u16::MAX), until, now),
            Err(TokenRefusal::Full)
        );
        // A holder renewing its own token is not a new one.
        assert!(table.register("t", holder(0), until, now).is_ok());
    }

    #[test]
    fn a_registration_is_renewed_only_near_its_end_and_after_a_notify() {
        let now = Instant::now();
        let inbox = TokenInbox::default();
        let ttl = Duration::from_secs(10);
        assert!(inbox.claim_registration(2, "t", ttl, now));
        assert!(!inbox.claim_registration(2, "t", ttl, now + Duration::from_secs(1)));
        // Held for at most 5 s: renewed within its last 500 ms.
        assert!(inbox.claim_registration(2, "t", ttl, now + Duration::from_millis(4_600)));
        inbox.notified("t", holder(9), now);
        assert!(inbox.claim_registration(2, "t", ttl, now + Duration::from_millis(4_700)));
        assert_eq!(inbox.notified_total(), 1);
    }

    fn held(offset: u64) -> HeldRecord {
        HeldRecord {
            partition: 0,
            offset,
            nonce: 7,
            expires_at_ms: 0,
        }
    }

    #[test]
    fn a_notification_owes_one_claim_to_the_notifying_owner() {
        let now = Instant::now();
        let inbox = TokenInbox::default();
        inbox.notified("t", holder(1), now);

        assert!(inbox.owes_claim("t", holder(1), now));
        assert!(!inbox.take_claim("t", holder(2), now), "another owner");
        assert!(!inbox.take_claim("u", holder(1), now), "another topic");
        assert!(inbox.take_claim("t", holder(1), now));
        assert!(!inbox.take_claim("t", holder(1), now), "owed once");
        assert!(!inbox.owes_claim("t", holder(1), now));
    }

    #[test]
    fn a_claim_is_not_owed_once_the_hold_lapsed() {
        let now = Instant::now();
        let inbox = TokenInbox::default();
        inbox.notified("t", holder(1), now);
        assert!(!inbox.take_claim("t", holder(1), now + CLAIM_HOLD));
    }

    #[test]
    fn holds_are_taken_by_their_holder_only_and_only_before_their_deadline() {
        let now = Instant::now();
        let mut holds = HoldTable::default();
        holds.insert("t", holder(1), held(3), now, now + CLAIM_HOLD);
        holds.insert(
            "t",
            holder(1),
            held(4),
            now,
            now + Duration::from_millis(10),
        );

        assert!(holds.take("t", holder(2), now).is_empty());
        let later = now + Duration::from_millis(20);
        assert_eq!(holds.take("t", holder(1), later), vec![held(3)]);
        assert!(holds.take("t", holder(1), later).is_empty(), "taken once");
    }

    #[test]
    fn a_holder_has_room_for_a_bounded_number_of_holds() {
        let now = Instant::now();
        let mut holds = HoldTable::default();
        for offset in 0..HOLDS_PER_HOLDER_MAX as u64 {
            assert!(holds.has_room("t", holder(1), now));
            holds.insert("t", holder(1), held(offset), now, now + CLAIM_HOLD);
        }
        assert!(!holds.has_room("t", holder(1), now));
        assert!(holds.has_room("t", holder(2), now));
        assert!(holds.has_room("t", holder(1), now + CLAIM_HOLD), "lapsed");
    }
}
