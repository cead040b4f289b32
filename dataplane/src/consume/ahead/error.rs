//! Errors of the consumer state store.

use std::io;
use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StateError {
    /// Loading a partition's state failed: the position is unknown.
    #[error("consumer state in {dir}: {op} failed: {source}")]
    Io {
        /// The partition directory.
        dir: PathBuf,
        /// What was being done.
        op: &'static str,
        /// The disk's error.
        #[source]
        source: io::Error,
    },
    /// These partitions' positions could not be made durable (a disk error
    /// now or earlier latched them); their positions after a restart may be
    /// older, which redelivers messages.
    #[error("consumer state of {} partition(s) not durable (first: {})", .dirs.len(), first_dir(.dirs))]
    NotDurable {
        /// The latched partition directories.
        dirs: Vec<PathBuf>,
    },
}

fn first_dir(dirs: &[PathBuf]) -> String {
    dirs.first()
        .map_or_else(String::new, |dir| dir.display().to_string())
}
