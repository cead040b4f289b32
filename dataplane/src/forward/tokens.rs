//! Delivery tokens, simplified (spec §3 "Cross-node consume"): a node with
//! consumes of a topic parked registers a token with each live remote owner
//! (`TokenRegister`, 30); when a record of the topic commits there, the
//! owner spends every live token of the topic by telling its holder
//! (`TokenNotify`, 31), whose parked consumes then probe at once instead of
//! waiting for the next re-probe.
//!
//! Unlike the spec, the owner does not hold the record back for the
//! notified node's claim: another consumer may take it first, and the
//! notified consume then finds nothing and parks again. The re-probe
//! cadence stays as the safety net.
//!
//! - [`TokenTable`] (owner): live tokens per topic, single use.
//! - [`TokenInbox`] (requester): the handler of opcode 31 and the memory of
//!   which owners hold a live token of this node.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use narad_protocol::consume::decode_forward_request;
use narad_protocol::{Inbound, Opcode, OperationLimit, Response, Router, RpcError, TokenNotify};
use parking_lot::Mutex;
use tokio::sync::Notify;

use crate::dispatch::NodeId;

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

    /// Spends every live token of `topic`: the holders to notify. Expired
    /// tokens lapse silently.
    pub fn spend(&mut self, topic: &str, now: Instant) -> Vec<SocketAddr> {
        let Some(holders) = self.topics.remove(topic) else {
            return Vec::new();
        };
        let mut live: Vec<SocketAddr> = holders
            .into_iter()
            .filter(|(_, expiry)| *expiry > now)
            .map(|(holder, _)| holder)
            .collect();
        live.sort_unstable();
        live
    }

    /// Whether `topic` has a token that has not expired.
    pub fn has_live(&self, topic: &str, now: Instant) -> bool {
        self.topics
            .get(topic)
            .is_some_and(|holders| holders.values().any(|expiry| *expiry > now))
    }
}

/// The requester's side of tokens: wakes parked consumes when an owner
/// notifies, and remembers which owners hold a live token of this node.
#[derive(Debug, Default)]
pub struct TokenInbox {
    wakers: Mutex<HashMap<String, Arc<Notify>>>,
    registered: Mutex<HashMap<(NodeId, String), Instant>>,
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
        self.notified(&notify.topic);
        Ok(Response::no_content())
    }

    /// A record of `topic` committed at some owner: tokens of the topic
    /// are spent (single use), parked consumes wake.
    pub fn notified(&self, topic: &str) {
        self.notified_total.fetch_add(1, Ordering::Relaxed);
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
        assert_eq!(table.spend("t", now), vec![holder(1)]);
        assert!(table.spend("t", now).is_empty());
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
        assert!(table.spend("t", later).is_empty());
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
        inbox.notified("t");
        assert!(inbox.claim_registration(2, "t", ttl, now + Duration::from_millis(4_700)));
        assert_eq!(inbox.notified_total(), 1);
    }
}
