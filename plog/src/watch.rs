//! Waiting for the high watermark from async code.

use tokio::sync::watch;

use crate::error::LogError;

/// What the watch carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct HwmState {
    pub(crate) high_watermark: u64,
    pub(crate) closed: bool,
}

/// A subscription to one log's high watermark. Every successful commit
/// wakes it; cloning gives an independent subscription.
#[derive(Clone, Debug)]
pub struct HwmWatch {
    receiver: watch::Receiver<HwmState>,
}

impl HwmWatch {
    pub(crate) fn new(receiver: watch::Receiver<HwmState>) -> Self {
        Self { receiver }
    }

    /// The high watermark now.
    pub fn high_watermark(&self) -> u64 {
        self.receiver.borrow().high_watermark
    }

    /// Resolves once the high watermark is above `offset` (a record at
    /// `offset` is visible), with the high watermark it saw.
    ///
    /// # Errors
    /// [`LogError::Closed`] when the log closes (or is dropped) first.
    pub async fn wait_beyond(&mut self, offset: u64) -> Result<u64, LogError> {
        let state = self
            .receiver
            .wait_for(|state| state.high_watermark > offset || state.closed)
            .await
            .map_err(|_| LogError::Closed)?;
        if state.high_watermark > offset {
            Ok(state.high_watermark)
        } else {
            Err(LogError::Closed)
        }
    }
}
