//! What the data node needs of remote children (spec §1.4 and §4, v3.2)
//! beyond the metastore's rules: the probe that checks a target before an
//! attach or a resume ([`probe`]), the node's rate limits of remote-child
//! writes and unshipped-record checks ([`limits`]), a remote child's
//! state as its cursors report it ([`state`]), what a resume decides from
//! every member's checks ([`resume`]), and the checks this node runs for
//! another's resume (opcode 34, [`served`]).

pub mod limits;
pub mod probe;
pub mod resume;
pub mod served;
pub mod state;

pub use limits::{RemoteChildLimits, UNSHIPPED_CHECK_EVERY, WRITES_PER_MINUTE};
pub use probe::{
    Capabilities, Check, CheckOutcome, CheckReport, NoRemoteProbe, ProbeFuture, RemoteProbe,
};
pub use resume::{MemberCheck, ResumeRefusal, resume_verdict};
pub use served::{RemoteCheckService, answer_of};
pub use state::{CursorTimes, LinkState, cursor_times, link_state, skip_allowed};
