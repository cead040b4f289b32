//! The data nodes' RPC addresses, for commits to partitions other data
//! nodes own.
//!
//! The metastore's member records give each node's RPC address as text,
//! `host:port`, the host maybe a name (a StatefulSet pod's DNS name). The
//! metadata feed publishes those texts; the address book resolves them
//! into the data plane's [`AddressTable`] whenever they change and again
//! every [`ADDRESS_REFRESH`], because a name keeps its text while the
//! address behind it changes when a pod is replaced.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use narad_dataplane::remote::AddressTable;
use narad_dataplane::topology::NodeId;
use narad_dataplane::topology::node_of;
use narad_meta::Metastore;
use tracing::{info, warn};

/// Each data node's RPC address as its member record spells it.
pub(crate) type MemberAddrs = BTreeMap<NodeId, String>;

/// Each data node's RPC address as its member record spells it
/// (`host:port`, the host maybe a name).
pub(crate) fn member_rpc_addrs(metastore: &Metastore) -> MemberAddrs {
    metastore
        .members()
        .filter_map(|member| Some((node_of(&member.id)?, member.rpc_addr.clone())))
        .collect()
}

/// How often every member's address is resolved again when nothing
/// changed.
pub(crate) const ADDRESS_REFRESH: Duration = Duration::from_secs(5);

/// How long one name lookup may take; a slower one counts as failed and
/// the node keeps the address it had.
const RESOLVE_TIMEOUT: Duration = Duration::from_secs(2);

/// Resolves `text` (`host:port`) to its first address, or `None`.
async fn resolve(text: &str) -> Option<SocketAddr> {
    let lookup = tokio::net::lookup_host(text);
    match tokio::time::timeout(RESOLVE_TIMEOUT, lookup).await {
        Ok(Ok(mut found)) => found.next(),
        Ok(Err(_)) | Err(_) => None,
    }
}

/// Keeps an [`AddressTable`] in line with the member records.
#[derive(Debug)]
pub(crate) struct AddressBook {
    table: Arc<AddressTable>,
    /// Nodes with an address in the table.
    known: BTreeSet<NodeId>,
    /// Address texts that did not resolve, warned about once each.
    unresolved: BTreeSet<String>,
}

impl AddressBook {
    /// A book writing into `table`.
    pub(crate) fn new(table: Arc<AddressTable>) -> Self {
        Self {
            table,
            known: BTreeSet::new(),
            unresolved: BTreeSet::new(),
        }
    }

    /// Resolves every member's address into the table and forgets nodes
    /// that are no longer members. A member whose address does not resolve
    /// keeps the one it had (commits to it fail and are retried until it
    /// resolves, or go elsewhere after the dispatcher's reroute grace).
    pub(crate) async fn refresh(&mut self, members: &MemberAddrs) {
        let gone: Vec<NodeId> = self
            .known
            .iter()
            .filter(|node| !members.contains_key(node))
            .copied()
            .collect();
        for node in gone {
            self.table.remove(node);
            self.known.remove(&node);
        }
        self.unresolved
            .retain(|text| members.values().any(|member| member == text));
        for (&node, text) in members {
            match resolve(text).await {
                Some(addr) => {
                    if self.known.insert(node) || self.unresolved.remove(text) {
                        info!(node, %addr, "data node RPC address known");
                    }
                    self.table.set(node, addr);
                }
                None => {
                    if self.unresolved.insert(text.clone()) {
                        warn!(node, address = %text, "data node RPC address does not resolve; retrying");
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use narad_dataplane::remote::OwnerAddresses;

    use super::*;

    fn members(pairs: &[(NodeId, &str)]) -> MemberAddrs {
        pairs
            .iter()
            .map(|(node, text)| (*node, (*text).to_owned()))
            .collect()
    }

    #[tokio::test]
    async fn a_member_address_resolves_into_the_table() {
        let table = Arc::new(AddressTable::new());
        let mut book = AddressBook::new(Arc::clone(&table));
        book.refresh(&members(&[(2, "127.0.0.1:7001"), (3, "localhost:7002")]))
            .await;
        assert_eq!(table.rpc_addr(2), "127.0.0.1:7001".parse().ok());
        let named = table.rpc_addr(3).expect("localhost resolves");
        assert!(named.ip().is_loopback() && named.port() == 7002, "{named}");
    }

    #[tokio::test]
    async fn a_node_no_longer_a_member_is_forgotten() {
        let table = Arc::new(AddressTable::new());
        let mut book = AddressBook::new(Arc::clone(&table));
        book.refresh(&members(&[(2, "127.0.0.1:7001"), (3, "127.0.0.1:7002")]))
            .await;
        book.refresh(&members(&[(3, "127.0.0.1:7002")])).await;
        assert_eq!(table.rpc_addr(2), None);
        assert_eq!(table.rpc_addr(3), "127.0.0.1:7002".parse().ok());
    }

    #[tokio::test]
    async fn an_address_that_stops_resolving_keeps_the_last_one() {
        let table = Arc::new(AddressTable::new());
        let mut book = AddressBook::new(Arc::clone(&table));
        book.refresh(&members(&[(2, "127.0.0.1:7001")])).await;
        book.refresh(&members(&[(2, "not an address")])).await;
        assert_eq!(table.rpc_addr(2), "127.0.0.1:7001".parse().ok());
    }

    #[tokio::test]
    async fn a_changed_address_replaces_the_old_one() {
        let table = Arc::new(AddressTable::new());
        let mut book = AddressBook::new(Arc::clone(&table));
        book.refresh(&members(&[(2, "127.0.0.1:7001")])).await;
        book.refresh(&members(&[(2, "127.0.0.1:7009")])).await;
        assert_eq!(table.rpc_addr(2), "127.0.0.1:7009".parse().ok());
    }
}
