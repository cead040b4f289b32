//! The `nodes[]` of a remote as `GET /v1/remotes[/{name}]` shows it: each
//! data node's own look at the remote's credential (whether its secret
//! opens it, whether its current secret derives the key it is sealed
//! under). This node's comes from its own credentials; every other live
//! member is asked for its status `with_remotes` over node RPC (opcode
//! 33), all at once within
//! [`NODE_STATUS_BUDGET`](super::super::cluster::NODE_STATUS_BUDGET) (the pattern and budget
//! of the detailed cluster listing).
//!
//! Every data member has an entry, so a listing never hides a node. One
//! whose view could not be had (marked dead, no answer within the budget,
//! an older release that refuses `with_remotes`, a node that does not
//! report remotes) or whose replica does not hold the remote yet has
//! `"credential":"unknown"`, `null` `credential_version` and
//! `key_current`, and the reason in `error`; the listing also names the
//! members that gave no views in `not_answering`.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use narad_meta::{MemberStatus, Metastore};
use narad_protocol::NodeStatus as NodeStatusRequest;
use serde_json::{Value, json};

use super::super::ApiState;
use super::super::cluster::node_statuses;
use super::check::{local_node_view, node_view_json};
use crate::topology::{NodeId, node_of};

/// The `credential` of a node whose view is not known.
const UNKNOWN: &str = "unknown";
/// The `error` of a node that answered without a view of the remote.
const NOT_HELD: &str = "its replica does not hold this remote (yet)";
/// The `error` of a member marked dead, which is not asked.
const DEAD: &str = "marked dead";
/// The `error` of a node that answered without any remote views.
const NO_VIEWS: &str = "it does not report its views of the remotes";

/// What one node gave.
#[derive(Debug)]
enum Gave {
    /// Its views, `nodes[]` entries by remote name.
    Views(HashMap<String, Value>),
    /// No views: its member id, and why.
    Nothing { id: String, error: String },
}

/// Every data node's views of the remotes, in node order.
#[derive(Debug, Default)]
pub(crate) struct NodeViews {
    by_node: BTreeMap<NodeId, Gave>,
}

impl NodeViews {
    /// The `nodes[]` of remote `name`: one entry per data node.
    pub(crate) fn of(&self, name: &str) -> Vec<Value> {
        self.by_node
            .iter()
            .map(|(node, gave)| match gave {
                Gave::Views(views) => views
                    .get(name)
                    .cloned()
                    .unwrap_or_else(|| unknown(*node, NOT_HELD)),
                Gave::Nothing { error, .. } => unknown(*node, error),
            })
            .collect()
    }

    /// The listing's `not_answering`: `{"node","error"}` of each member
    /// that gave no views, by node.
    pub(crate) fn not_answering(&self) -> Value {
        self.by_node
            .values()
            .filter_map(|gave| match gave {
                Gave::Views(_) => None,
                Gave::Nothing { id, error } => Some(json!({ "node": id, "error": error })),
            })
            .collect()
    }
}

/// The entry of `node` whose view is not known, for `error`.
fn unknown(node: NodeId, error: &str) -> Value {
    json!({
        "node": node,
        "credential": UNKNOWN,
        "credential_version": null,
        "key_current": null,
        "error": error,
    })
}

/// This node's views of `metastore`'s remotes, and every other data
/// member's (asked at once, as [`node_statuses`] does).
pub(crate) async fn gather(state: &Arc<ApiState>, metastore: &Metastore) -> NodeViews {
    let local = state.replica.local_node();
    let mut views = NodeViews::default();
    let own = metastore
        .remotes()
        .map(|remote| {
            let view = local_node_view(state, metastore, remote);
            (remote.name.clone(), view)
        })
        .collect();
    views.by_node.insert(local, Gave::Views(own));
    let mut asked = BTreeMap::new();
    for member in metastore.members() {
        let Some(node) = node_of(&member.id).filter(|node| *node != local) else {
            continue;
        };
        if member.status == MemberStatus::Dead {
            let (id, error) = (member.id.clone(), DEAD.to_owned());
            views.by_node.insert(node, Gave::Nothing { id, error });
        } else {
            asked.insert(member.id.clone(), node);
        }
    }
    let request = NodeStatusRequest {
        with_remotes: true,
        with_command_version: false,
    };
    let statuses = node_statuses(state, asked.keys().cloned().collect(), request).await;
    for (id, answer) in statuses {
        let Some(&node) = asked.get(&id) else {
            continue;
        };
        let gave = match answer.map(|status| status.remotes) {
            Ok(Some(remotes)) => Gave::Views(
                remotes
                    .iter()
                    .map(|view| (view.name.clone(), node_view_json(node, view)))
                    .collect(),
            ),
            Ok(None) => Gave::Nothing {
                id,
                error: NO_VIEWS.to_owned(),
            },
            Err(error) => Gave::Nothing { id, error },
        };
        views.by_node.insert(node, gave);
    }
    views
}
