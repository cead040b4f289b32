//! The gate of one remote on one node (spec §4): while a remote fails,
//! its links stop sending and one probe at a time finds out whether it is
//! back, instead of every link hammering it.
//!
//! Open, every shipment goes. A remote-wide failure (credential, TLS,
//! guard, redirect, no batch route) closes it at once; three transient
//! failures in a row (no answer, `5xx`, an unexpected answer) close it
//! too; a `429` closes it for its `Retry-After`. Closed, one probe goes
//! through per backoff, which starts at 250 ms and doubles after each
//! failed probe up to 30 s; a `Retry-After` (at most 60 s) pushes the next
//! probe later. Any answer that proves the remote works (a success, or a
//! failure that concerns only one link's topic or record) opens it.
//!
//! Pure: the caller passes the monotonic time of its node's clock.

use std::time::Duration;

use narad_clock::millis;

use crate::state::{Failure, LinkState, RETRY_AFTER_MAX, Scope};

/// The first probe backoff after the gate closes.
pub const BACKOFF_MIN: Duration = Duration::from_millis(250);
/// The longest probe backoff.
pub const BACKOFF_MAX: Duration = Duration::from_secs(30);
/// Transient failures in a row that close the gate.
pub const TRANSIENT_FAILURES_TO_CLOSE: u32 = 3;

/// What the gate lets a shipment do now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Admit {
    /// Go; report the outcome with [`Gate::report`] and this permit.
    Send(Permit),
    /// Wait until this monotonic time; the remote is in `state`.
    Wait {
        /// When the next probe may go (clock milliseconds).
        until_ms: u64,
        /// The failure that closed the gate.
        state: LinkState,
    },
}

/// A shipment the gate let through.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Permit {
    /// Whether it is the closed gate's one probe.
    pub probe: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Open {
        transient_in_row: u32,
    },
    Closed {
        state: LinkState,
        backoff_ms: u64,
        next_probe_ms: u64,
        probing: bool,
    },
}

/// The gate; see the module doc.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Gate {
    phase: Phase,
}

impl Default for Gate {
    fn default() -> Self {
        Self::new()
    }
}

impl Gate {
    /// An open gate.
    pub fn new() -> Self {
        Self {
            phase: Phase::Open {
                transient_in_row: 0,
            },
        }
    }

    /// Whether shipments go without waiting.
    pub fn is_open(&self) -> bool {
        matches!(self.phase, Phase::Open { .. })
    }

    /// The current probe backoff (`narad_remote_gate_backoff_seconds`);
    /// zero while open.
    pub fn backoff(&self) -> Duration {
        match self.phase {
            Phase::Open { .. } => Duration::ZERO,
            Phase::Closed { backoff_ms, .. } => Duration::from_millis(backoff_ms),
        }
    }

    /// Asks to send at `now_ms`. Closed, the first caller at or past the
    /// probe time gets the one probe; others wait until the probe time
    /// (or, while the probe runs, one backoff from now).
    pub fn admit(&mut self, now_ms: u64) -> Admit {
        match &mut self.phase {
            Phase::Open { .. } => Admit::Send(Permit { probe: false }),
            Phase::Closed {
                state,
                backoff_ms,
                next_probe_ms,
                probing,
            } => {
                if *probing || now_ms < *next_probe_ms {
                    let until_ms = if *probing {
                        now_ms.saturating_add(*backoff_ms).max(*next_probe_ms)
                    } else {
                        *next_probe_ms
                    };
                    return Admit::Wait {
                        until_ms,
                        state: *state,
                    };
                }
                *probing = true;
                Admit::Send(Permit { probe: true })
            }
        }
    }

    /// Reports a shipment's outcome at `now_ms`: `Ok` when every request
    /// got `202`, else the failure that ended it.
    pub fn report(&mut self, now_ms: u64, permit: Permit, outcome: Result<(), &Failure>) {
        let failure = match outcome {
            Ok(()) => return self.open(),
            Err(failure) => failure,
        };
        let retry_after_ms = failure
            .retry_after
            .map_or(0, |wait| millis(wait.min(RETRY_AFTER_MAX)));
        match (failure.state.scope(), self.phase) {
            (Scope::Link, _) => self.open(),
            // A shipment sent before the gate closed adds nothing to the
            // probe's backoff.
            (_, Phase::Closed { .. }) if !permit.probe => {}
            (_, Phase::Closed { backoff_ms, .. }) => {
                let doubled = backoff_ms.saturating_mul(2).min(millis(BACKOFF_MAX));
                self.close(now_ms, failure.state, doubled, retry_after_ms);
            }
            (Scope::Transient, Phase::Open { transient_in_row }) => {
                let in_row = transient_in_row + 1;
                if in_row >= TRANSIENT_FAILURES_TO_CLOSE {
                    self.close(now_ms, failure.state, millis(BACKOFF_MIN), retry_after_ms);
                } else {
                    self.phase = Phase::Open {
                        transient_in_row: in_row,
                    };
                }
            }
            (Scope::RemoteWide | Scope::Throttled, Phase::Open { .. }) => {
                self.close(now_ms, failure.state, millis(BACKOFF_MIN), retry_after_ms);
            }
        }
    }

    /// A shipment let through with `permit` ended without an outcome (its
    /// future was dropped): a probe's slot frees, so the next caller
    /// probes; nothing else changes.
    pub fn abandon(&mut self, permit: Permit) {
        if let Phase::Closed { probing, .. } = &mut self.phase
            && permit.probe
        {
            *probing = false;
        }
    }

    fn open(&mut self) {
        self.phase = Phase::Open {
            transient_in_row: 0,
        };
    }

    fn close(&mut self, now_ms: u64, state: LinkState, backoff_ms: u64, retry_after_ms: u64) {
        self.phase = Phase::Closed {
            state,
            backoff_ms,
            next_probe_ms: now_ms.saturating_add(backoff_ms.max(retry_after_ms)),
            probing: false,
        };
    }
}

#[cfg(test)]
mod tests {
    use narad_clock::{Clock, ManualClock};

    use super::*;

    fn failure(state: LinkState) -> Failure {
        Failure {
            state,
            record: None,
            retry_after: None,
            timed_out: false,
            status: None,
            detail: String::new(),
        }
    }

    fn send(gate: &mut Gate, clock: &ManualClock) -> Permit {
        match gate.admit(clock.now_ms()) {
            Admit::Send(permit) => permit,
            other => panic!("expected to send, got {other:?}"),
        }
    }

    fn fail(gate: &mut Gate, clock: &ManualClock, state: LinkState) {
        let permit = send(gate, clock);
        gate.report(clock.now_ms(), permit, Err(&failure(state)));
    }

    fn wait_until(gate: &mut Gate, clock: &ManualClock) -> u64 {
        match gate.admit(clock.now_ms()) {
            Admit::Wait { until_ms, .. } => until_ms,
            other => panic!("expected to wait, got {other:?}"),
        }
    }

    #[test]
    fn three_transient_failures_in_a_row_close_the_gate() {
        let clock = ManualClock::new(1_000);
        let mut gate = Gate::new();
        fail(&mut gate, &clock, LinkState::Unavailable);
        fail(&mut gate, &clock, LinkState::Unavailable);
        assert!(gate.is_open());
        fail(&mut gate, &clock, LinkState::Unavailable);
        assert!(!gate.is_open());
        assert_eq!(wait_until(&mut gate, &clock), 1_250);
    }

    #[test]
    fn a_success_between_transient_failures_resets_the_count() {
        let clock = ManualClock::new(0);
        let mut gate = Gate::new();
        fail(&mut gate, &clock, LinkState::Unavailable);
        fail(&mut gate, &clock, LinkState::Unavailable);
        let permit = send(&mut gate, &clock);
        gate.report(clock.now_ms(), permit, Ok(()));
        fail(&mut gate, &clock, LinkState::Unavailable);
        fail(&mut gate, &clock, LinkState::Unknown);
        assert!(gate.is_open());
    }

    #[test]
    fn a_remote_wide_failure_closes_at_once() {
        for state in [
            LinkState::AuthFailed,
            LinkState::TlsFailed,
            LinkState::DestinationRefused,
            LinkState::RedirectRefused,
            LinkState::NoBatchProduce,
        ] {
            let clock = ManualClock::new(0);
            let mut gate = Gate::new();
            fail(&mut gate, &clock, state);
            assert!(!gate.is_open(), "{state}");
            match gate.admit(clock.now_ms()) {
                Admit::Wait { state: shown, .. } => assert_eq!(shown, state),
                other => panic!("{other:?}"),
            }
        }
    }

    #[test]
    fn a_link_failure_leaves_the_gate_open() {
        let clock = ManualClock::new(0);
        let mut gate = Gate::new();
        for _ in 0..5 {
            fail(&mut gate, &clock, LinkState::RejectedRecord);
            fail(&mut gate, &clock, LinkState::TargetMissing);
        }
        assert!(gate.is_open());
    }

    #[test]
    fn one_probe_per_backoff_doubling_to_thirty_seconds() {
        let clock = ManualClock::new(0);
        let mut gate = Gate::new();
        fail(&mut gate, &clock, LinkState::AuthFailed);
        let mut expected_backoff = 250;
        let mut seen = Vec::new();
        for _ in 0..10 {
            let until = wait_until(&mut gate, &clock);
            assert_eq!(until, clock.now_ms() + expected_backoff);
            clock.set(until - 1);
            assert_eq!(wait_until(&mut gate, &clock), until);
            clock.set(until);
            let probe = send(&mut gate, &clock);
            assert!(probe.probe);
            // While the probe runs nobody else goes.
            assert!(matches!(gate.admit(clock.now_ms()), Admit::Wait { .. }));
            gate.report(clock.now_ms(), probe, Err(&failure(LinkState::AuthFailed)));
            seen.push(gate.backoff().as_millis());
            expected_backoff = (expected_backoff * 2).min(30_000);
        }
        assert_eq!(
            seen,
            vec![
                500, 1_000, 2_000, 4_000, 8_000, 16_000, 30_000, 30_000, 30_000, 30_000
            ]
        );
    }

    #[test]
    fn a_successful_probe_opens_the_gate() {
        let clock = ManualClock::new(0);
        let mut gate = Gate::new();
        fail(&mut gate, &clock, LinkState::TlsFailed);
        clock.advance(250);
        let probe = send(&mut gate, &clock);
        gate.report(clock.now_ms(), probe, Ok(()));
        assert!(gate.is_open());
        assert_eq!(gate.backoff(), Duration::ZERO);
        assert!(!send(&mut gate, &clock).probe);
    }

    #[test]
    fn an_abandoned_probe_lets_the_next_caller_probe() {
        let clock = ManualClock::new(0);
        let mut gate = Gate::new();
        fail(&mut gate, &clock, LinkState::AuthFailed);
        clock.advance(250);
        let probe = send(&mut gate, &clock);
        assert!(matches!(gate.admit(clock.now_ms()), Admit::Wait { .. }));
        gate.abandon(probe);
        assert!(send(&mut gate, &clock).probe);
        assert_eq!(gate.backoff(), BACKOFF_MIN);
    }

    #[test]
    fn retry_after_is_honoured_up_to_sixty_seconds() {
        let clock = ManualClock::new(0);
        let mut gate = Gate::new();
        let permit = send(&mut gate, &clock);
        let mut throttled = failure(LinkState::Throttled);
        throttled.retry_after = Some(Duration::from_secs(7));
        gate.report(clock.now_ms(), permit, Err(&throttled));
        assert_eq!(wait_until(&mut gate, &clock), 7_000);
        clock.set(7_000);
        let probe = send(&mut gate, &clock);
        throttled.retry_after = Some(Duration::from_secs(3_600));
        gate.report(clock.now_ms(), probe, Err(&throttled));
        assert_eq!(wait_until(&mut gate, &clock), 7_000 + 60_000);
    }

    #[test]
    fn a_failure_of_a_shipment_sent_before_the_close_does_not_stretch_the_backoff() {
        let clock = ManualClock::new(0);
        let mut gate = Gate::new();
        let early = send(&mut gate, &clock);
        fail(&mut gate, &clock, LinkState::AuthFailed);
        gate.report(clock.now_ms(), early, Err(&failure(LinkState::AuthFailed)));
        assert_eq!(gate.backoff(), BACKOFF_MIN);
        assert_eq!(wait_until(&mut gate, &clock), 250);
    }
}
