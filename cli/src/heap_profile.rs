//! The heap-profiling build (`--features dhat-heap`): dhat is the global
//! allocator instead of mimalloc, and a node process writes a dhat profile
//! of the heap that is live at a chosen moment.
//!
//! `NARAD_DHAT_AFTER_SECS=N` makes a node command (`dev`, `data`,
//! `control`) write its profile N seconds after start and stop profiling;
//! the process goes on serving. Without it the profile is written when the
//! process exits normally. `NARAD_DHAT_FILE` names the file (default
//! `dhat-heap.json` in the working directory). Open it with dhat's viewer
//! (`dh_view.html`); its "At t-end" figures are the heap live when the
//! profile was written. Client verbs and `narad bench` never profile, so a
//! benchmark started as `narad bench soak` profiles only its `narad dev`
//! child.
//!
//! The wall-clock sleep here is deliberate: this is a diagnostic build,
//! outside the broker's decisions, and dhat has no clock to be given.

use std::time::Duration;

/// The variable holding the seconds after start at which to write the
/// profile.
const AFTER_SECS_VAR: &str = "NARAD_DHAT_AFTER_SECS";
/// The variable naming the profile file.
const FILE_VAR: &str = "NARAD_DHAT_FILE";

/// Starts profiling this process. The returned guard writes the profile
/// when dropped (normal exit); with `NARAD_DHAT_AFTER_SECS` set, a thread
/// takes the guard and drops it after that delay instead.
pub(crate) fn start() -> Option<dhat::Profiler> {
    let file = std::env::var_os(FILE_VAR).unwrap_or_else(|| "dhat-heap.json".into());
    let profiler = dhat::Profiler::builder().file_name(file).build();
    let after = std::env::var(AFTER_SECS_VAR)
        .ok()
        .map(|secs| secs.parse::<u64>());
    match after {
        Some(Ok(secs)) => {
            let spawned = std::thread::Builder::new()
                .name("dhat-dump".into())
                .spawn(move || {
                    std::thread::sleep(Duration::from_secs(secs));
                    drop(profiler);
                });
            if let Err(error) = spawned {
                eprintln!("narad: cannot start the dhat dump thread: {error}");
            }
            None
        }
        Some(Err(error)) => {
            eprintln!(
                "narad: {AFTER_SECS_VAR} is not a whole number of seconds ({error}); the profile is written at exit"
            );
            Some(profiler)
        }
        None => Some(profiler),
    }
}
