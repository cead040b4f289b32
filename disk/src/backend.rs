//! Choosing the backend a node runs on.

use std::fmt;
use std::io;
use std::str::FromStr;
use std::sync::Arc;

use crate::Disk;
use crate::portable::{PORTABLE_THREADS_DEFAULT, PortableDisk};
use crate::uring::{URING_THREADS_DEFAULT, UringDisk};

/// Which backend to run on, as configured.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum BackendChoice {
    /// io_uring when the kernel allows it, else the portable backend.
    #[default]
    Auto,
    /// io_uring or nothing: fail when it cannot be set up.
    IoUring,
    /// The portable backend, even where io_uring works.
    Portable,
}

impl fmt::Display for BackendChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Auto => "auto",
            Self::IoUring => "io_uring",
            Self::Portable => "portable",
        })
    }
}

impl FromStr for BackendChoice {
    type Err = io::Error;

    /// Parses `auto`, `io_uring` (or `io-uring`) and `portable`.
    fn from_str(text: &str) -> io::Result<Self> {
        match text {
            "auto" => Ok(Self::Auto),
            "io_uring" | "io-uring" => Ok(Self::IoUring),
            "portable" => Ok(Self::Portable),
            other => Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("unknown disk backend {other:?} (expected auto, io_uring or portable)"),
            )),
        }
    }
}

/// Starts the backend `choice` names and logs which one runs and why.
///
/// # Errors
/// With [`BackendChoice::IoUring`], when io_uring cannot be set up; with any
/// choice, when the storage threads cannot be spawned.
pub fn open_backend(choice: BackendChoice) -> io::Result<Arc<dyn Disk>> {
    match choice {
        BackendChoice::Portable => {
            tracing::info!(backend = "portable", "disk backend chosen by configuration");
            Ok(Arc::new(PortableDisk::new(PORTABLE_THREADS_DEFAULT)?))
        }
        BackendChoice::IoUring => {
            let disk = UringDisk::new(URING_THREADS_DEFAULT).inspect_err(|error| {
                tracing::error!(%error, reason = uring_failure_reason(error), "io_uring was required but cannot be set up");
            })?;
            tracing::info!(backend = "io_uring", "disk backend chosen by configuration");
            Ok(Arc::new(disk))
        }
        BackendChoice::Auto => match UringDisk::new(URING_THREADS_DEFAULT) {
            Ok(disk) => {
                tracing::info!(backend = "io_uring", "disk backend: io_uring is available");
                Ok(Arc::new(disk))
            }
            Err(error) => {
                tracing::warn!(
                    %error,
                    reason = uring_failure_reason(&error),
                    backend = "portable",
                    "io_uring cannot be set up; falling back to the portable disk backend"
                );
                Ok(Arc::new(PortableDisk::new(PORTABLE_THREADS_DEFAULT)?))
            }
        },
    }
}

/// The usual cause behind an io_uring setup error, for the log.
fn uring_failure_reason(error: &io::Error) -> &'static str {
    match error.raw_os_error() {
        Some(libc::ENOSYS) => "the kernel has no io_uring, or a seccomp profile blocks it",
        Some(libc::EPERM) => "io_uring is disabled (kernel.io_uring_disabled) or denied by policy",
        Some(libc::ENOMEM) => "the ring's memory could not be locked (RLIMIT_MEMLOCK)",
        _ if error.kind() == io::ErrorKind::Unsupported => "the kernel's io_uring is too old",
        _ => "unexpected io_uring setup error",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::BackendKind;

    #[test]
    fn choices_parse_from_their_names() {
        for choice in [
            BackendChoice::Auto,
            BackendChoice::IoUring,
            BackendChoice::Portable,
        ] {
            assert_eq!(choice.to_string().parse::<BackendChoice>().unwrap(), choice);
        }
        assert!("fast".parse::<BackendChoice>().is_err());
    }

    #[test]
    fn portable_choice_runs_the_portable_backend() {
        let disk = open_backend(BackendChoice::Portable).unwrap();
        assert_eq!(disk.kind(), BackendKind::Portable);
    }

    #[test]
    fn auto_choice_runs_io_uring_where_the_kernel_allows_it() {
        let disk = open_backend(BackendChoice::Auto).unwrap();
        let expected = if UringDisk::new(1).is_ok() {
            BackendKind::IoUring
        } else {
            BackendKind::Portable
        };
        assert_eq!(disk.kind(), expected);
    }
}
