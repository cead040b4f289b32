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
//!
//! Every instant here is milliseconds on the node's monotonic
//! [`Clock`]; the tables are told the time, the inbox reads its clock.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use narad_clock::{Clock, millis};
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

/// A registration is renewed when it has this long or less left (spec:
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

/// The owner's live tokens: per topic, holder → expiry (ms on the clock).
#[derive(Debug, Default)]
pub struct TokenTable {
    topics: HashMap<String, HashMap<SocketAddr, u64>>,
}

impl TokenTable {
    /// Records (or renews) `holder`'s token for `topic` until
    /// `expires_at_ms`; it is live while the clock is before that.
    ///
    /// # Errors
    /// [`TokenRefusal::Full`] at the limits (expired tokens are dropped
    /// first).
    pub fn register(
        &mut self,
        topic: &str,
        holder: SocketAddr,
        expires_at_ms: u64,
        now_ms: u64,
    ) -> Result<(), TokenRefusal> {
        if !self.topics.contains_key(topic) && self.topics.len() >= TOKEN_TOPICS_MAX {
            self.topics.retain(|_, holders| {
                holders.retain(|_, expiry| *expiry > now_ms);
                !holders.is_empty()
            });
            if self.topics.len() >= TOKEN_TOPICS_MAX {
                return Err(TokenRefusal::Full);
            }
        }
        let holders = self.topics.entry(topic.to_owned()).or_default();
        if !holders.contains_key(&holder) && holders.len() >= TOKEN_HOLDERS_PER_TOPIC_MAX {
            holders.retain(|_, expiry| *expiry > now_ms);
            if holders.len() >= TOKEN_HOLDERS_PER_TOPIC_MAX {
                return Err(TokenRefusal::Full);
            }
        }
        holders.insert(holder, expires_at_ms);
        Ok(())
    }

    /// The holders of live tokens of `topic`, in address order; expired
    /// tokens lapse silently.
    pub fn live_holders(&mut self, topic: &str, now_ms: u64) -> Vec<SocketAddr> {
        let Some(holders) = self.topics.get_mut(topic) else {
            return Vec::new();
        };
        holders.retain(|_, expiry| *expiry > now_ms);
        let mut live: Vec<SocketAddr> = holders.keys().copied().collect();
        if live.is_empty() {
            self.topics.remove(topic);
        }
        live.sort_unstable();
        live
    }

    /// Spends `holder`'s token of `topic` (single use). Returns whether it
    /// was live; an expired one lapses.
    pub fn spend(&mut self, topic: &str, holder: SocketAddr, now_ms: u64) -> bool {
        let Some(holders) = self.topics.get_mut(topic) else {
            return false;
        };
        let live = holders
            .remove(&holder)
            .is_some_and(|expiry| expiry > now_ms);
        if holders.is_empty() {
            self.topics.remove(topic);
        }
        live
    }

    /// Live tokens of `topic`.
    pub fn live(&self, topic: &str, now_ms: u64) -> usize {
        self.topics.get(topic).map_or(0, |holders| {
            holders.values().filter(|expiry| **expiry > now_ms).count()
        })
    }

    /// Whether `topic` has a token that has not expired.
    pub fn has_live(&self, topic: &str, now_ms: u64) -> bool {
        self.topics
            .get(topic)
            .is_some_and(|holders| holders.values().any(|expiry| *expiry > now_ms))
    }
}

/// The owner's held records, per topic and holder. Each lapses when its
/// lease does (`expires_at_ms`, on the consume service's clock), so the
/// table and the lease under a hold never disagree. Entries exist only for
/// spent tokens, so the token table's limits bound it, and
/// [`HOLDS_PER_HOLDER_MAX`] each holder.
#[derive(Debug, Default)]
pub struct HoldTable {
    holds: HashMap<(String, SocketAddr), Vec<HeldRecord>>,
}

fn hold_live(held: &HeldRecord, now_ms: u64) -> bool {
    held.expires_at_ms > now_ms
}

impl HoldTable {
    /// Keeps `held` for `holder`'s claim until its lease lapses (`now_ms`
    /// is the present, to drop lapsed entries).
    ///
    /// # Panics
    /// If the holder already has [`HOLDS_PER_HOLDER_MAX`] live holds (the
    /// caller checks [`HoldTable::has_room`] first).
    pub fn insert(&mut self, topic: &str, holder: SocketAddr, held: HeldRecord, now_ms: u64) {
        let key = (topic.to_owned(), holder);
        if !self.holds.contains_key(&key) {
            // Drop lapsed holders' entries now and then, not on each call.
            if self.holds.len() >= TOKEN_TOPICS_MAX {
                self.holds.retain(|_, holds| {
                    holds.retain(|held| hold_live(held, now_ms));
                    !holds.is_empty()
                });
            }
        }
        let holds = self.holds.entry(key).or_default();
        assert!(
            holds.len() < HOLDS_PER_HOLDER_MAX,
            "a holder was given more than {HOLDS_PER_HOLDER_MAX} holds"
        );
        holds.push(held);
    }

    /// Whether `holder` may be given another hold of `topic` (lapsed holds
    /// are dropped first).
    pub fn has_room(&mut self, topic: &str, holder: SocketAddr, now_ms: u64) -> bool {
        let key = (topic.to_owned(), holder);
        let Some(holds) = self.holds.get_mut(&key) else {
            return true;
        };
        holds.retain(|held| hold_live(held, now_ms));
        if holds.is_empty() {
            self.holds.remove(&key);
            return true;
        }
        holds.len() < HOLDS_PER_HOLDER_MAX
    }

    /// Takes `claimant`'s holds of `topic` that have not lapsed, oldest
    /// first.
    pub fn take(&mut self, topic: &str, claimant: SocketAddr, now_ms: u64) -> Vec<HeldRecord> {
        self.holds
            .remove(&(topic.to_owned(), claimant))
            .unwrap_or_default()
            .into_iter()
            .filter(|held| hold_live(held, now_ms))
            .collect()
    }

    /// Live holds of `topic` for `holder` (tests, diagnostics).
    pub fn count(&self, topic: &str, holder: SocketAddr, now_ms: u64) -> usize {
        self.holds
            .get(&(topic.to_owned(), holder))
            .map_or(0, |holds| {
                holds.iter().filter(|held| hold_live(held, now_ms)).count()
            })
    }
}

/// The requester's side of tokens: wakes parked consumes when an owner
/// notifies, remembers which owners hold a live token of this node, and
/// which owners are owed a claim, measured on the node's clock.
#[derive(Debug)]
pub struct TokenInbox {
    clock: Arc<dyn Clock>,
    wakers: Mutex<HashMap<String, Arc<Notify>>>,
    /// Per owner and topic: until when its registration counts (ms).
    registered: Mutex<HashMap<(NodeId, String), u64>>,
    /// Per topic and notifying owner's address: until when its hold lasts
    /// (ms).
    claims: Mutex<HashMap<(String, SocketAddr), u64>>,
    notified_total: AtomicU64,
}

impl TokenInbox {
    /// An empty inbox on `clock`; route it with [`TokenInbox::route`]
    /// before the transport is bound.
    pub fn new(clock: Arc<dyn Clock>) -> Arc<Self> {
        Arc::new(Self {
            clock,
            wakers: Mutex::default(),
            registered: Mutex::default(),
            claims: Mutex::default(),
            notified_total: AtomicU64::new(0),
        })
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
        self.notified(&notify.topic, inbound.peer);
        Ok(Response::no_content())
    }

    /// The owner at `owner` holds a record of `topic` for this node: the
    /// next probe of that owner within [`CLAIM_HOLD`] claims it; tokens of
    /// the topic are spent (single use), parked consumes wake.
    pub fn notified(&self, topic: &str, owner: SocketAddr) {
        let now_ms = self.clock.now_ms();
        self.notified_total.fetch_add(1, Ordering::Relaxed);
        {
            let mut claims = self.claims.lock();
            let key = (topic.to_owned(), owner);
            if !claims.contains_key(&key) && claims.len() >= CLAIMS_OWED_MAX {
                claims.retain(|_, until_ms| *until_ms > now_ms);
            }
            if claims.contains_key(&key) || claims.len() < CLAIMS_OWED_MAX {
                claims.insert(key, now_ms.saturating_add(millis(CLAIM_HOLD)));
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
    /// registered for min(`ttl`, 5 s) from now.
    pub fn claim_registration(&self, node: NodeId, topic: &str, ttl: Duration) -> bool {
        let now_ms = self.clock.now_ms();
        let mut registered = self.registered.lock();
        registered.retain(|_, until_ms| *until_ms > now_ms);
        let key = (node, topic.to_owned());
        if registered
            .get(&key)
            .is_some_and(|until_ms| *until_ms > now_ms.saturating_add(millis(TOKEN_RENEW_BEFORE)))
        {
            return false;
        }
        registered.insert(
            key,
            now_ms.saturating_add(millis(ttl.min(TOKEN_RENEW_EVERY))),
        );
        true
    }

    /// Whether a probe of `topic` at `owner` must carry the `Claim` flag:
    /// `owner` notified this node and its hold has not lapsed. The claim is
    /// owed once: the first probe takes it.
    pub fn take_claim(&self, topic: &str, owner: SocketAddr) -> bool {
        let now_ms = self.clock.now_ms();
        self.claims
            .lock()
            .remove(&(topic.to_owned(), owner))
            .is_some_and(|until_ms| until_ms > now_ms)
    }

    /// Whether a claim of `topic` is owed to `owner` (without taking it).
    pub fn owes_claim(&self, topic: &str, owner: SocketAddr) -> bool {
        let now_ms = self.clock.now_ms();
        self.claims
            .lock()
            .get(&(topic.to_owned(), owner))
            .is_some_and(|until_ms| *until_ms > now_ms)
    }

    /// Notifications received (tests, diagnostics).
    pub fn notified_total(&self) -> u64 {
        self.notified_total.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use narad_clock::ManualClock;

    use super::*;

    const NOW_MS: u64 = 1_000;

    fn holder(port: u16) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], port))
    }

    /// An inbox on a clock the test moves.
    fn inbox() -> (Arc<TokenInbox>, Arc<ManualClock>) {
        let clock = Arc::new(ManualClock::new(NOW_MS));
        (TokenInbox::new(Arc::clone(&clock) as Arc<dyn Clock>), clock)
    }

    #[test]
    fn a_token_is_spent_once() {
        let mut table = TokenTable::default();
        table
            .register("t", holder(1), NOW_MS + 1_000, NOW_MS)
            .expect("taken");
        assert_eq!(table.live_holders("t", NOW_MS), vec![holder(1)]);
        assert!(table.spend("t", holder(1), NOW_MS));
        assert!(!table.spend("t", holder(1), NOW_MS));
        assert!(table.live_holders("t", NOW_MS).is_empty());
    }

    #[test]
    fn a_token_lapses_at_its_expiry_without_a_notification() {
        let mut table = TokenTable::default();
        let expires_at_ms = NOW_MS + 10;
        table
            .register("t", holder(1), expires_at_ms, NOW_MS)
            .expect("taken");
        assert!(table.has_live("t", expires_at_ms - 1));
        assert!(!table.has_live("t", expires_at_ms));
        assert!(table.live_holders("t", expires_at_ms).is_empty());
        assert!(!table.spend("t", holder(1), expires_at_ms));
    }

    #[test]
    fn holders_per_topic_are_bounded() {
        let mut table = TokenTable::default();
        let until_ms = NOW_MS + 1_000;
        for port in 0..TOKEN_HOLDERS_PER_TOPIC_MAX as u16 {
            table
                .register("t", holder(port), until_ms, NOW_MS)
                .expect("taken");
        }
        assert_eq!(
            table.register("t", holder(u16::MAX), until_ms, NOW_MS),
            Err(TokenRefusal::Full)
        );
        // A holder renewing its own token is not a new one.
        assert!(table.register("t", holder(0), until_ms, NOW_MS).is_ok());
    }

    #[test]
    fn a_full_topic_takes_a_new_holder_once_an_old_token_expired() {
        let mut table = TokenTable::default();
        for port in 0..TOKEN_HOLDERS_PER_TOPIC_MAX as u16 {
            let until_ms = NOW_MS + 1_000 + u64::from(port);
            table
                .register("t", holder(port), until_ms, NOW_MS)
                .expect("taken");
        }
        let first_lapsed_ms = NOW_MS + 1_000;
        assert!(
            table
                .register("t", holder(u16::MAX), NOW_MS + 5_000, first_lapsed_ms)
                .is_ok()
        );
    }

    #[test]
    fn a_registration_is_renewed_only_near_its_end_and_after_a_notify() {
        let (inbox, clock) = inbox();
        let ttl = Duration::from_secs(10);
        assert!(inbox.claim_registration(2, "t", ttl));
        clock.advance(1_000);
        assert!(!inbox.claim_registration(2, "t", ttl));
        // Held for at most 5 s: renewed within its last 500 ms.
        clock.advance(3_600);
        assert!(inbox.claim_registration(2, "t", ttl));
        inbox.notified("t", holder(9));
        clock.advance(100);
        assert!(inbox.claim_registration(2, "t", ttl));
        assert_eq!(inbox.notified_total(), 1);
    }

    #[test]
    fn a_registration_is_renewed_once_half_a_second_or_less_is_left() {
        let (inbox, clock) = inbox();
        let ttl = Duration::from_secs(2);
        assert!(inbox.claim_registration(2, "t", ttl));
        clock.advance(millis(ttl - TOKEN_RENEW_BEFORE) - 1);
        assert!(!inbox.claim_registration(2, "t", ttl), "501 ms left");
        clock.advance(1);
        assert!(inbox.claim_registration(2, "t", ttl), "500 ms left");
    }

    fn held(offset: u64, expires_at_ms: u64) -> HeldRecord {
        HeldRecord {
            partition: 0,
            offset,
            nonce: 7,
            expires_at_ms,
        }
    }

    #[test]
    fn a_notification_owes_one_claim_to_the_notifying_owner() {
        let (inbox, _clock) = inbox();
        inbox.notified("t", holder(1));

        assert!(inbox.owes_claim("t", holder(1)));
        assert!(!inbox.take_claim("t", holder(2)), "another owner");
        assert!(!inbox.take_claim("u", holder(1)), "another topic");
        assert!(inbox.take_claim("t", holder(1)));
        assert!(!inbox.take_claim("t", holder(1)), "owed once");
        assert!(!inbox.owes_claim("t", holder(1)));
    }

    #[test]
    fn a_claim_is_owed_until_the_claim_hold_has_passed_on_the_clock() {
        let (inbox, clock) = inbox();
        inbox.notified("t", holder(1));

        clock.advance(millis(CLAIM_HOLD) - 1);
        assert!(inbox.owes_claim("t", holder(1)), "1 ms of the hold left");
        clock.advance(1);
        assert!(!inbox.owes_claim("t", holder(1)));
        assert!(!inbox.take_claim("t", holder(1)));
    }

    #[test]
    fn a_second_notification_restarts_the_claim_window() {
        let (inbox, clock) = inbox();
        inbox.notified("t", holder(1));
        clock.advance(millis(CLAIM_HOLD) - 1);
        inbox.notified("t", holder(1));

        clock.advance(millis(CLAIM_HOLD) - 1);

        assert!(inbox.take_claim("t", holder(1)));
    }

    #[test]
    fn holds_are_taken_by_their_holder_only_and_only_before_their_lease_lapses() {
        let mut holds = HoldTable::default();
        holds.insert("t", holder(1), held(3, NOW_MS + 500), NOW_MS);
        holds.insert("t", holder(1), held(4, NOW_MS + 10), NOW_MS);

        assert!(holds.take("t", holder(2), NOW_MS).is_empty());
        assert_eq!(holds.count("t", holder(1), NOW_MS + 9), 2);
        let lapsed_ms = NOW_MS + 10;
        assert_eq!(
            holds.take("t", holder(1), lapsed_ms),
            vec![held(3, NOW_MS + 500)]
        );
        assert!(
            holds.take("t", holder(1), lapsed_ms).is_empty(),
            "taken once"
        );
    }

    #[test]
    fn a_holder_has_room_for_a_bounded_number_of_holds() {
        let mut holds = HoldTable::default();
        let expires_at_ms = NOW_MS + millis(CLAIM_HOLD);
        for offset in 0..HOLDS_PER_HOLDER_MAX as u64 {
            assert!(holds.has_room("t", holder(1), NOW_MS));
            holds.insert("t", holder(1), held(offset, expires_at_ms), NOW_MS);
        }
        assert!(!holds.has_room("t", holder(1), NOW_MS));
        assert!(holds.has_room("t", holder(2), NOW_MS));
        assert!(holds.has_room("t", holder(1), expires_at_ms), "lapsed");
    }
}
