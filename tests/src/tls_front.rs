//! The HTTPS front a remote cluster sits behind, for tests: the bench's
//! [`narad_bench::tls_front::TlsFront`], started or the test fails.

use std::ops::Deref;

use narad_bench::tls_front::TlsFront as Front;

/// A running front; stops when dropped. Reads as the bench's front
/// (`port`, `ca_pem`, `url()`).
#[derive(Debug)]
pub struct TlsFront(Front);

impl TlsFront {
    /// A front on a free port relaying to `127.0.0.1:<target_port>`.
    ///
    /// # Panics
    /// If the certificate cannot be made or the port not bound.
    pub fn start(target_port: u16) -> Self {
        Self(Front::start(target_port).expect("the HTTPS front starts"))
    }
}

impl Deref for TlsFront {
    type Target = Front;

    fn deref(&self) -> &Front {
        &self.0
    }
}
