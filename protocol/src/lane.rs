//! Lanes: separate stream pools per kind of traffic, so a burst of produce
//! commits never queues an ack or a control message behind it.

use std::fmt;

/// A pool of streams on each peer connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Lane {
    /// Produce commits (`CommitProduce`, `CommitProduceBatch`).
    Produce,
    /// Forwarded consumes, long polls included.
    Consume,
    /// Forwarded acks, extends and nacks.
    Ack,
    /// Control-plane traffic: metadata, admin, Raft, transfers.
    Control,
}

impl Lane {
    /// Every lane, in index order.
    pub const ALL: [Lane; 4] = [Lane::Produce, Lane::Consume, Lane::Ack, Lane::Control];

    /// Streams in this lane's pool on one connection (spec: 16 for the three
    /// messaging lanes, 4 for control). Requests round-robin over them, so one
    /// large frame holds up at most one stream's worth of requests.
    pub const fn streams(self) -> usize {
        match self {
            Lane::Produce | Lane::Consume | Lane::Ack => 16,
            Lane::Control => 4,
        }
    }

    pub(crate) const fn index(self) -> usize {
        match self {
            Lane::Produce => 0,
            Lane::Consume => 1,
            Lane::Ack => 2,
            Lane::Control => 3,
        }
    }
}

impl fmt::Display for Lane {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = match self {
            Lane::Produce => "produce",
            Lane::Consume => "consume",
            Lane::Ack => "ack",
            Lane::Control => "control",
        };
        f.write_str(name)
    }
}

const _: () = {
    let mut total = 0;
    let mut i = 0;
    while i < Lane::ALL.len() {
        assert!(Lane::ALL[i].index() == i);
        total += Lane::ALL[i].streams();
        i += 1;
    }
    assert!(total < crate::limits::CONNECTION_STREAMS_MAX as usize);
};
