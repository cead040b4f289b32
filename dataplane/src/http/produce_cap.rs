//! The per-identity cap on produces in flight (`http.max_produce_in_flight_per_identity`,
//! off by default): one client cannot hold every accept slot of a node.
//! A batch counts as its message count (clamped to the cap), and as one
//! while its body is read.

use std::collections::HashMap;
use std::sync::Arc;

use axum::http::StatusCode;
use parking_lot::Mutex;

use super::error::ApiError;

/// Counts of produces in flight by identity.
#[derive(Debug, Default)]
pub struct ProduceCap {
    limit: usize,
    in_flight: Arc<Mutex<HashMap<String, usize>>>,
}

/// Units one request holds; released on drop.
#[derive(Debug)]
pub(crate) struct CapHold {
    identity: String,
    units: usize,
    in_flight: Arc<Mutex<HashMap<String, usize>>>,
}

impl ProduceCap {
    /// A cap of `limit` produces per identity; 0 turns it off.
    pub fn new(limit: usize) -> Self {
        Self {
            limit,
            in_flight: Arc::default(),
        }
    }

    /// Takes `units` (clamped to the cap) for `identity`.
    ///
    /// # Errors
    /// `429` when the identity already holds the cap.
    pub(crate) fn take(&self, identity: &str, units: usize) -> Result<Option<CapHold>, ApiError> {
        if self.limit == 0 {
            return Ok(None);
        }
        let units = units.clamp(1, self.limit);
        let mut in_flight = self.in_flight.lock();
        let held = in_flight.get(identity).copied().unwrap_or(0);
        if held + units > self.limit {
            return Err(ApiError::new(
                StatusCode::TOO_MANY_REQUESTS,
                format!(
                    "too many in-flight produce requests for this identity (limit {} per node)",
                    self.limit
                ),
            ));
        }
        in_flight.insert(identity.to_owned(), held + units);
        Ok(Some(CapHold {
            identity: identity.to_owned(),
            units,
            in_flight: Arc::clone(&self.in_flight),
        }))
    }
}

impl Drop for CapHold {
    fn drop(&mut self) {
        let mut in_flight = self.in_flight.lock();
        let left = in_flight
            .get(&self.identity)
            .copied()
            .unwrap_or(0)
            .saturating_sub(self.units);
        if left == 0 {
            in_flight.remove(&self.identity);
        } else {
            in_flight.insert(self.identity.clone(), left);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn off_by_default() {
        let cap = ProduceCap::new(0);
        assert!(cap.take("alice", 1_000).unwrap().is_none());
    }

    #[test]
    fn refuses_past_the_limit_and_frees_on_drop() {
        let cap = ProduceCap::new(2);
        let first = cap.take("alice", 1).unwrap();
        let _second = cap.take("alice", 1).unwrap();
        let error = cap.take("alice", 1).unwrap_err();
        assert_eq!(error.status, StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(
            error.message,
            "too many in-flight produce requests for this identity (limit 2 per node)"
        );
        assert!(
            cap.take("bob", 1).is_ok(),
            "other identities are not affected"
        );
        drop(first);
        assert!(cap.take("alice", 1).is_ok());
    }

    #[test]
    fn a_batch_counts_its_messages_clamped_to_the_cap() {
        let cap = ProduceCap::new(3);
        let batch = cap.take("alice", 1_000).unwrap();
        assert!(cap.take("alice", 1).is_err());
        drop(batch);
        assert!(cap.take("alice", 1).is_ok());
    }
}
