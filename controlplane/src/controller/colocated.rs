//! Anti-affinity violations: child partitions that share a node with their
//! parent's partition of the same index (spec §4 "Replica child"). The
//! controller prefers another node when it places a child partition, but a
//! single-node cluster, or a rebalance where balance wins, leaves some
//! together; `narad_colocated_child_partitions` counts them.

use narad_meta::Metastore;

/// Child partitions p whose owner also owns the parent's partition p. A
/// partition without an owner, and a child partition whose index the parent
/// does not have, is not counted.
pub fn colocated_child_partitions(state: &Metastore) -> u64 {
    state
        .topics()
        .filter_map(|child| Some((child, &child.parent.as_ref()?.parent)))
        .map(|(child, parent)| {
            let colocated = (0..child.partitions).filter(|&partition| {
                let owner = state.owner(&child.name, partition);
                owner.is_some() && owner == state.owner(parent, partition)
            });
            colocated.count() as u64
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use narad_meta::{
        Actor, ApplyContext, AssignPartitions, AttachEpoch, Command, CreateTopic, IncarnationId,
        Metastore, NewLink, PartitionOwner, RegisterMember,
    };

    use super::colocated_child_partitions;

    /// A metastore with members `n1` and `n2` and the parent `orders` of 3
    /// partitions on `n1`, `n2`, `n1`.
    struct Cluster {
        meta: Metastore,
        index: u64,
    }

    impl Cluster {
        fn new() -> Self {
            let mut cluster = Self {
                meta: Metastore::new(),
                index: 0,
            };
            for id in ["n1", "n2"] {
                cluster.apply(Command::RegisterMember(RegisterMember {
                    id: id.into(),
                    http_addr: format!("{id}:7942"),
                    rpc_addr: format!("{id}:7943"),
                    at_ms: 1,
                }));
            }
            cluster.topic("orders", 3, None, &["n1", "n2", "n1"]);
            cluster
        }

        fn apply(&mut self, command: Command) {
            self.index += 1;
            let context = ApplyContext { index: self.index };
            if let Err(error) = self.meta.apply(&command, context) {
                panic!("the metastore refused {command:?}: {error}");
            }
        }

        /// Creates `name` (under `parent`, if given) and places partition i
        /// on `owners[i]`; an empty owner leaves it unplaced.
        fn topic(&mut self, name: &str, partitions: u32, parent: Option<&str>, owners: &[&str]) {
            let id = IncarnationId::from_bits(self.index + 100);
            let parent = parent.map(|parent| NewLink {
                parent: parent.into(),
                parent_id: self.meta.topic(parent).expect("parent").id.clone(),
                fanout_delay_ms: None,
                attach_epoch: AttachEpoch::from_bits(1),
                attach_offsets: vec![0; 3],
            });
            self.apply(Command::CreateTopic(CreateTopic {
                partitions: Some(i64::from(partitions)),
                parent,
                ..CreateTopic::named(Actor::SecurityOff, name, id.clone(), 0)
            }));
            let owners = owners
                .iter()
                .enumerate()
                .filter(|(_, owner)| !owner.is_empty())
                .map(|(partition, owner)| PartitionOwner {
                    partition: partition as u32,
                    owner: (*owner).to_owned(),
                })
                .collect();
            self.apply(Command::AssignPartitions(AssignPartitions {
                topic: name.into(),
                id,
                owners,
            }));
        }
    }

    #[test]
    fn a_child_placed_apart_from_its_parent_counts_nothing() {
        let mut cluster = Cluster::new();
        cluster.topic("audit", 3, Some("orders"), &["n2", "n1", "n2"]);
        cluster.topic("plain", 3, None, &["n1", "n2", "n1"]);
        assert_eq!(colocated_child_partitions(&cluster.meta), 0);
    }

    #[test]
    fn each_child_partition_on_its_parent_partitions_node_counts_once() {
        let mut cluster = Cluster::new();
        cluster.topic("audit", 3, Some("orders"), &["n1", "n1", "n1"]);
        cluster.topic("billing", 3, Some("orders"), &["n1", "n2", "n2"]);
        assert_eq!(colocated_child_partitions(&cluster.meta), 2 + 2);
    }

    #[test]
    fn unplaced_partitions_and_indexes_the_parent_lacks_are_not_counted() {
        let mut cluster = Cluster::new();
        cluster.topic("audit", 5, Some("orders"), &["", "n2", "n2", "n1", "n1"]);
        assert_eq!(colocated_child_partitions(&cluster.meta), 1);
    }
}
