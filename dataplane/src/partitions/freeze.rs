//! Handoff freezes: while a partition's move hands it to its target, the
//! source commits nothing to it, so the copy the target finishes holds
//! exactly the partition's high watermark.
//!
//! A freeze starts at `PrepareHandoff` and names a token. Unfenced, it
//! lapses after its TTL unless the target's calls under the token re-arm
//! it, and the target can release it. Once the target fenced it (its copy
//! is whole and verified; the flip may commit at any moment), it holds
//! until the move ends: the flip commits (this node is no longer the owner)
//! or the leader clears the move. A fence is also written to the partition
//! directory (`handoff.fence`) before it is answered, so a restart of the
//! source cannot thaw it by forgetting it.
//!
//! Whether a move ended is read from this node's replica, and only from a
//! replica that has applied at least the index it had applied when the
//! freeze began: an older replica (a restart still catching up) may not
//! show the move yet, and would thaw a freeze whose flip is committing.

use std::collections::HashMap;
use std::io;
use std::path::Path;
use std::time::Duration;

use narad_clock::millis;
use narad_disk::Disk;
use parking_lot::Mutex;

use super::note;
use crate::topology::Destination;

/// File a fenced freeze is kept in, inside the partition directory.
pub const FENCE_FILE_NAME: &str = "handoff.fence";

/// An unfenced freeze lapses this long after the last call under its token
/// (the spec's 30 s). Long enough for the target's final copy of a busy
/// partition's tail; short enough that a target that died mid-handoff
/// holds produce back only briefly (the dispatcher keeps retrying, and
/// reroutes past 3 s).
pub const FREEZE_TTL: Duration = Duration::from_secs(30);

/// One freeze.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Freeze {
    /// Names the freeze in the target's calls; never 0.
    pub token: u64,
    /// The member id of the move's target.
    pub target: String,
    /// The replica's applied index when the freeze began.
    pub since_index: u64,
    /// Lapses at this point of the node's monotonic clock
    /// ([`narad_clock::Clock::now_ms`]) unless fenced.
    pub until_ms: u64,
    /// Whether the target fenced it.
    pub fenced: bool,
}

impl Freeze {
    /// Whether it still stops commits at `now_ms`.
    pub fn holds(&self, now_ms: u64) -> bool {
        self.fenced || now_ms < self.until_ms
    }
}

/// Why a call under a token was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FreezeError {
    /// No freeze holds the partition, or another token does.
    #[error("no handoff freeze with this token holds the partition")]
    Unknown,
    /// The freeze lapsed before the call.
    #[error("the handoff freeze lapsed; prepare the handoff again")]
    Lapsed,
}

/// The freezes of this node's partitions.
#[derive(Debug, Default)]
pub struct Freezes {
    held: Mutex<HashMap<Destination, Freeze>>,
}

impl Freezes {
    /// Whether commits to `destination` are stopped at `now_ms`.
    pub fn holds(&self, destination: &Destination, now_ms: u64) -> bool {
        self.held
            .lock()
            .get(destination)
            .is_some_and(|freeze| freeze.holds(now_ms))
    }

    /// Starts (or replaces) the freeze of `destination` for the move to
    /// `target`, under a new token.
    pub fn start(
        &self,
        destination: &Destination,
        target: &str,
        since_index: u64,
        now_ms: u64,
    ) -> Freeze {
        let mut held = self.held.lock();
        let token = loop {
            let token: u64 = rand::random();
            if token != 0 && held.get(destination).is_none_or(|old| old.token != token) {
                break token;
            }
        };
        let freeze = Freeze {
            token,
            target: target.to_owned(),
            since_index,
            until_ms: lapse_at(now_ms),
            fenced: false,
        };
        held.insert(destination.clone(), freeze.clone());
        freeze
    }

    /// Restores a fence found on disk (a restart of the source).
    pub fn restore(&self, destination: &Destination, fence: Freeze) {
        self.held.lock().insert(destination.clone(), fence);
    }

    /// Re-arms the freeze under `token` for another TTL.
    ///
    /// # Errors
    /// [`FreezeError`] when no freeze under `token` holds.
    pub fn rearm(
        &self,
        destination: &Destination,
        token: u64,
        now_ms: u64,
    ) -> Result<(), FreezeError> {
        let mut held = self.held.lock();
        let freeze = current(&mut held, destination, token, now_ms)?;
        freeze.until_ms = lapse_at(now_ms);
        Ok(())
    }

    /// Fences the freeze under `token`: it holds until the move ends.
    ///
    /// # Errors
    /// [`FreezeError`] when no freeze under `token` holds.
    pub fn fence(
        &self,
        destination: &Destination,
        token: u64,
        now_ms: u64,
    ) -> Result<Freeze, FreezeError> {
        let mut held = self.held.lock();
        let freeze = current(&mut held, destination, token, now_ms)?;
        freeze.fenced = true;
        Ok(freeze.clone())
    }

    /// Undoes [`Self::fence`] when writing the fence down failed, so the
    /// freeze lapses as an unfenced one would.
    pub fn unfence(&self, destination: &Destination, token: u64) {
        if let Some(freeze) = self
            .held
            .lock()
            .get_mut(destination)
            .filter(|freeze| freeze.token == token)
        {
            freeze.fenced = false;
        }
    }

    /// Releases the unfenced freeze under `token`; a fenced one stays.
    /// Returns whether a freeze was released.
    pub fn release(&self, destination: &Destination, token: u64) -> bool {
        let mut held = self.held.lock();
        let releasable = held
            .get(destination)
            .is_some_and(|freeze| freeze.token == token && !freeze.fenced);
        if releasable {
            held.remove(destination);
        }
        releasable
    }

    /// Drops the freeze of `destination`: its move ended.
    pub fn end(&self, destination: &Destination) -> Option<Freeze> {
        self.held.lock().remove(destination)
    }

    /// Every freeze, for the move runner's checks.
    pub fn all(&self) -> Vec<(Destination, Freeze)> {
        let held = self.held.lock();
        held.iter()
            .map(|(destination, freeze)| (destination.clone(), freeze.clone()))
            .collect()
    }

    /// Forgets lapsed unfenced freezes.
    pub fn forget_lapsed(&self, now_ms: u64) {
        self.held.lock().retain(|_, freeze| freeze.holds(now_ms));
    }
}

/// When a freeze started or re-armed at `now_ms` lapses.
fn lapse_at(now_ms: u64) -> u64 {
    now_ms.saturating_add(millis(FREEZE_TTL))
}

fn current<'a>(
    held: &'a mut HashMap<Destination, Freeze>,
    destination: &Destination,
    token: u64,
    now_ms: u64,
) -> Result<&'a mut Freeze, FreezeError> {
    let freeze = held
        .get_mut(destination)
        .filter(|freeze| freeze.token == token)
        .ok_or(FreezeError::Unknown)?;
    if freeze.holds(now_ms) {
        Ok(freeze)
    } else {
        Err(FreezeError::Lapsed)
    }
}

/// Writes a fence into `dir` (the partition directory): `target`, token
/// and applied index, one per line, then syncs the file and the directory.
///
/// # Errors
/// Any disk error; the fence is then not durable and must not be answered.
pub fn write_fence(disk: &dyn Disk, dir: &Path, fence: &Freeze) -> io::Result<()> {
    let text = format!("{}\n{}\n{}\n", fence.target, fence.token, fence.since_index);
    note::write_note(disk, dir, FENCE_FILE_NAME, &text)
}

/// Reads the fence in `dir`, if one is there: (target, token, applied
/// index). A file that does not parse is treated as a fence to nobody that
/// holds until the move ends (it was written only by a fence).
///
/// # Errors
/// Any disk error other than the file being absent.
pub fn read_fence(disk: &dyn Disk, dir: &Path) -> io::Result<Option<(String, u64, u64)>> {
    let Some(text) = note::read_note(disk, dir, FENCE_FILE_NAME)? else {
        return Ok(None);
    };
    let mut lines = text.lines();
    let target = lines.next().unwrap_or_default().to_owned();
    let token = lines
        .next()
        .and_then(|line| line.parse().ok())
        .unwrap_or(u64::MAX);
    let since = lines.next().and_then(|line| line.parse().ok()).unwrap_or(0);
    Ok(Some((target, token, since)))
}

/// Removes the fence in `dir`, if any, and syncs the directory.
///
/// # Errors
/// Any disk error other than the file being absent.
pub fn remove_fence(disk: &dyn Disk, dir: &Path) -> io::Result<()> {
    note::remove_note(disk, dir, FENCE_FILE_NAME)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn destination() -> Destination {
        Destination::new("orders", 2)
    }

    #[test]
    fn an_unfenced_freeze_lapses_and_a_fenced_one_holds() {
        let freezes = Freezes::default();
        let start = 1_000;
        let freeze = freezes.start(&destination(), "2", 7, start);
        assert!(freezes.holds(&destination(), start));
        let ttl_ms = lapse_at(0);
        let late = start + ttl_ms;
        assert!(!freezes.holds(&destination(), late));
        assert_eq!(
            freezes.rearm(&destination(), freeze.token, late),
            Err(FreezeError::Lapsed)
        );
        let freeze = freezes.start(&destination(), "2", 7, start);
        freezes
            .rearm(&destination(), freeze.token, start + ttl_ms / 2)
            .unwrap();
        assert!(freezes.holds(&destination(), late), "re-armed");
        freezes.fence(&destination(), freeze.token, late).unwrap();
        assert!(freezes.holds(&destination(), late + ttl_ms * 100));
        assert!(
            !freezes.release(&destination(), freeze.token),
            "a fenced freeze is not released by the target"
        );
        assert!(freezes.end(&destination()).is_some());
        assert!(!freezes.holds(&destination(), late));
    }

    #[test]
    fn calls_under_another_token_are_refused() {
        let freezes = Freezes::default();
        let now = 1_000;
        let old = freezes.start(&destination(), "2", 1, now);
        let new = freezes.start(&destination(), "2", 1, now);
        assert_ne!(old.token, new.token);
        assert_eq!(
            freezes.fence(&destination(), old.token, now),
            Err(FreezeError::Unknown)
        );
        assert!(!freezes.release(&destination(), old.token));
        assert!(freezes.release(&destination(), new.token));
        assert!(!freezes.holds(&destination(), now));
    }

    #[test]
    fn a_fence_survives_on_disk_until_removed() {
        let dir = tempfile::tempdir().unwrap();
        let disk = narad_disk::portable::PortableDisk::new(1).unwrap();
        assert_eq!(read_fence(&disk, dir.path()).unwrap(), None);
        let freezes = Freezes::default();
        let now = 1_000;
        let freeze = freezes.start(&destination(), "node-2", 41, now);
        let fenced = freezes.fence(&destination(), freeze.token, now).unwrap();
        write_fence(&disk, dir.path(), &fenced).unwrap();
        assert_eq!(
            read_fence(&disk, dir.path()).unwrap(),
            Some(("node-2".to_owned(), freeze.token, 41))
        );
        remove_fence(&disk, dir.path()).unwrap();
        assert_eq!(read_fence(&disk, dir.path()).unwrap(), None);
    }
}
