//! The control plane's metastore in the data plane's own types.
//!
//! The data plane keys nodes by a number and the control plane by the
//! `cluster.node_id` text; a data node registers its number as that text,
//! so an id that is not a number names no data node this bridge knows.

use std::collections::BTreeMap;
use std::sync::Arc;

use narad_controlplane::metastore::{self as cp, MemberStatus, Metastore};
use narad_dataplane::metadata::{
    Grant, GrantAction, Member, MetadataSnapshot, TopicMeta, TopicSchema, User,
};
use narad_dataplane::topology::NodeId;

/// The control plane's member id of data node `node`.
pub(crate) fn member_id(node: NodeId) -> String {
    node.to_string()
}

fn node_of(member: &str) -> Option<NodeId> {
    member.parse().ok()
}

fn cap(value: u64) -> u32 {
    u32::try_from(value).unwrap_or(u32::MAX)
}

fn schema(version: &cp::SchemaVersion) -> Arc<TopicSchema> {
    // The metastore stores only documents it parsed; one that no longer
    // parses is carried as a string rather than dropped.
    let document = serde_json::from_str(&version.document)
        .unwrap_or_else(|_| serde_json::Value::String(version.document.clone()));
    Arc::new(TopicSchema {
        version: version.version,
        document,
    })
}

fn topic(metastore: &Metastore, topic: &cp::Topic) -> TopicMeta {
    let mut meta = TopicMeta::new(&topic.name, Some(topic.id.as_str()), topic.partitions, 0);
    let slots = metastore.assignments(&topic.name).unwrap_or_default();
    meta.owners = (0..topic.partitions as usize)
        .map(|partition| {
            slots
                .get(partition)
                .and_then(Option::as_ref)
                .and_then(|assignment| node_of(&assignment.owner))
        })
        .collect();
    meta.schema_history = topic.schemas.iter().map(schema).collect();
    meta.schema = meta.schema_history.last().cloned();
    meta.max_in_flight_per_partition = cap(topic.max_in_flight_per_partition);
    meta.max_acked_ahead_per_partition = cap(topic.max_acked_ahead_per_partition);
    meta.fanout_delay_ms = topic.parent.as_ref().map_or(0, |link| link.fanout_delay_ms);
    meta.retention_ms = topic.retention_ms;
    meta.visibility_timeout_ms = topic.visibility_timeout_ms;
    meta.created_at_ms = topic.created_at_ms;
    meta.owner = topic.owner.clone();
    meta
}

fn grant_action(action: cp::GrantAction) -> GrantAction {
    match action {
        cp::GrantAction::Produce => GrantAction::Produce,
        cp::GrantAction::Consume => GrantAction::Consume,
        cp::GrantAction::Create => GrantAction::Create,
        cp::GrantAction::Admin => GrantAction::Admin,
    }
}

/// A data-plane grant in the control plane's type.
pub(crate) fn grant_to_control(grant: &Grant) -> cp::Grant {
    cp::Grant {
        action: match grant.action {
            GrantAction::Produce => cp::GrantAction::Produce,
            GrantAction::Consume => cp::GrantAction::Consume,
            GrantAction::Create => cp::GrantAction::Create,
            GrantAction::Admin => cp::GrantAction::Admin,
        },
        patterns: grant.patterns.clone(),
    }
}

fn user(user: &cp::User) -> User {
    User {
        username: user.username.clone(),
        password_hash: user.password_hash.as_str().to_owned(),
        root: user.root,
        grants: user
            .grants
            .iter()
            .map(|grant| Grant {
                action: grant_action(grant.action),
                patterns: grant.patterns.clone(),
            })
            .collect(),
        created_at_ms: user.created_at_ms,
        updated_at_ms: user.updated_at_ms,
    }
}

/// Each data node's RPC address as its member record spells it
/// (`host:port`, the host maybe a name).
pub(crate) fn member_rpc_addrs(metastore: &Metastore) -> BTreeMap<NodeId, String> {
    metastore
        .members()
        .filter_map(|member| Some((node_of(&member.id)?, member.rpc_addr.clone())))
        .collect()
}

/// The whole metastore as the data plane's snapshot at `applied_index`.
pub(crate) fn snapshot(metastore: &Metastore, applied_index: u64) -> MetadataSnapshot {
    MetadataSnapshot {
        applied_index,
        topics: metastore
            .topics()
            .map(|t| {
                let meta = topic(metastore, t);
                (Arc::clone(&meta.name), Arc::new(meta))
            })
            .collect(),
        members: metastore
            .members()
            .filter_map(|member| {
                let id = node_of(&member.id)?;
                let alive = member.status == MemberStatus::Alive;
                Some((id, Member { id, alive }))
            })
            .collect(),
        users: metastore
            .users()
            .map(|u| (u.username.clone(), Arc::new(user(u))))
            .collect(),
        users_version: metastore.versions().users,
    }
}

#[cfg(test)]
mod tests {
    use narad_controlplane::metastore::{
        Actor, ApplyContext, AssignPartitions, Command, CreateTopic, IncarnationId, PartitionOwner,
        RegisterMember, TopicDefaults,
    };

    use super::*;

    fn apply(metastore: &mut Metastore, index: u64, command: Command) {
        metastore
            .apply(&command, ApplyContext { index })
            .expect("applies");
    }

    fn store_with_a_topic_on_node_7() -> Metastore {
        let mut metastore = Metastore::new();
        apply(
            &mut metastore,
            1,
            Command::RegisterMember(RegisterMember {
                id: member_id(7),
                http_addr: "127.0.0.1:1".into(),
                rpc_addr: "127.0.0.1:2".into(),
                at_ms: 1,
            }),
        );
        apply(
            &mut metastore,
            2,
            Command::CreateTopic(CreateTopic {
                actor: Actor::SecurityOff,
                name: "orders".into(),
                id: IncarnationId::from_bits(0xab),
                partitions: Some(3),
                retention_ms: None,
                visibility_timeout_ms: None,
                max_in_flight_per_partition: None,
                max_acked_ahead_per_partition: None,
                schema: Some(r#"{"type":"object"}"#.into()),
                parent: None,
                defaults: TopicDefaults::default(),
                created_at_ms: 5,
            }),
        );
        apply(
            &mut metastore,
            3,
            Command::AssignPartitions(AssignPartitions {
                topic: "orders".into(),
                id: IncarnationId::from_bits(0xab),
                owners: vec![PartitionOwner {
                    partition: 1,
                    owner: member_id(7),
                }],
            }),
        );
        metastore
    }

    #[test]
    fn a_topic_converts_with_numeric_owners_and_unassigned_slots() {
        let converted = snapshot(&store_with_a_topic_on_node_7(), 3);
        assert_eq!(converted.applied_index, 3);
        let topic = &converted.topics["orders"];
        assert_eq!(topic.incarnation_id.as_deref(), Some("00000000000000ab"));
        assert_eq!(topic.owners, vec![None, Some(7), None]);
        assert_eq!(topic.created_at_ms, 5);
        topic.assert_valid();
    }

    #[test]
    fn a_topic_schema_converts_to_its_parsed_document() {
        let converted = snapshot(&store_with_a_topic_on_node_7(), 3);
        let schema = converted.topics["orders"].schema.clone().expect("schema");
        assert_eq!(schema.version, 1);
        assert_eq!(schema.document, serde_json::json!({"type": "object"}));
    }

    #[test]
    fn a_registered_member_converts_alive_under_its_number() {
        let converted = snapshot(&store_with_a_topic_on_node_7(), 3);
        assert_eq!(converted.members[&7], Member { id: 7, alive: true });
    }

    #[test]
    fn a_registered_member_gives_its_rpc_address_text() {
        let addrs = member_rpc_addrs(&store_with_a_topic_on_node_7());
        assert_eq!(addrs, BTreeMap::from([(7, "127.0.0.1:2".to_owned())]));
    }
}
