//! Which answers leave a member behind the command version a write needs.

use super::super::super::cluster::Statuses;
use super::behind;
use crate::status::NodeStatus;

fn reporting(command_version: Option<u8>) -> Result<NodeStatus, String> {
    Ok(NodeStatus {
        draining: false,
        produce_in_flight: 0,
        dispatch_backlog: 0,
        quarantine: Default::default(),
        moves: Vec::new(),
        remotes: Some(Vec::new()),
        command_version,
    })
}

#[test]
fn members_at_or_past_the_version_are_not_behind() {
    let statuses: Statuses = [
        ("n1".to_owned(), reporting(Some(4))),
        ("n2".to_owned(), reporting(Some(5))),
    ]
    .into();
    assert!(behind(&statuses, 4).is_empty());
}

#[test]
fn an_older_version_no_version_or_no_answer_is_behind() {
    let statuses: Statuses = [
        ("n1".to_owned(), reporting(Some(4))),
        ("n2".to_owned(), reporting(Some(3))),
        ("n3".to_owned(), reporting(None)),
        ("n4".to_owned(), Err("no answer within 2 s".to_owned())),
    ]
    .into();
    let behind = behind(&statuses, 4);
    let ids: Vec<&str> = behind.iter().map(|(id, _)| id.as_str()).collect();
    assert_eq!(ids, ["n2", "n3", "n4"]);
    assert!(behind[0].1.contains("version 3"), "{:?}", behind[0]);
    assert!(behind[1].1.contains("older release"), "{:?}", behind[1]);
    assert!(behind[2].1.contains("no answer"), "{:?}", behind[2]);
}
