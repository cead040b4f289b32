//! `narad control`: run a control-plane node.

use std::process::ExitCode;
use std::sync::Arc;

use narad_clock::SystemClock;
use narad_controlplane::node::ControlNode;
use narad_controlplane::node::config::{self, ControlSettings};
use tracing::{error, info};

use crate::process::{self, EXIT_START};
use crate::settings::SettingArgs;

/// Flags of `narad control`: `--config` and one per setting
/// ([`config::keys`]). Each setting has a config file key and an
/// environment variable too (see docs/operations.md); a flag wins over
/// both.
pub(crate) type ControlArgs = SettingArgs<ControlSettings>;

/// Runs a control node until SIGINT or SIGTERM.
pub(crate) fn run(args: &ControlArgs) -> ExitCode {
    let (config, runtime) = match process::configure(
        "control",
        args,
        |layers| config::resolve(layers, process::env),
        |config| (&config.log_level, &config.log_format),
    ) {
        Ok(started) => started,
        Err(code) => return code,
    };
    runtime.block_on(async move {
        let clock = Arc::new(SystemClock::new());
        let node = match ControlNode::start(config, clock).await {
            Ok(node) => node,
            Err(e) => {
                error!(error = %e, "control node did not start");
                return ExitCode::from(EXIT_START);
            }
        };
        wait_for_signal().await;
        info!("shutting down");
        node.shutdown().await;
        ExitCode::SUCCESS
    })
}

/// Resolves on the first SIGINT or SIGTERM.
pub(crate) async fn wait_for_signal() {
    let mut terminate =
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(signal) => signal,
            Err(e) => {
                error!(error = %e, "cannot watch SIGTERM; stopping on Ctrl-C only");
                let _ = tokio::signal::ctrl_c().await;
                return;
            }
        };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = terminate.recv() => {}
    }
}
