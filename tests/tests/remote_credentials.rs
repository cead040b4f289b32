//! Sealed remote credentials on disk (spec §1.10): three control nodes
//! that snapshot every few entries and a data node; remotes are added and
//! their passwords changed through the data node's API. Neither password
//! appears in any file of any node (a control node's `raft.redb` holds
//! its Raft log and its metastore snapshot), while the remote's name
//! does (so the search reads the files that hold the remote). The data
//! node then serves the per-remote credential series `ops/metrics.tsv`
//! marks `served-when` `remotes`.

use std::path::Path;

use narad_tests::cluster::{ADMIN, ADMIN_PASSWORD, ControlCluster, DataProcess, WAIT_MAX};
use narad_tests::metrics_list::assert_served_when;

const FIRST_PASSWORD: &str = "first-replicator-password-0123456789";
const SECOND_PASSWORD: &str = "second-replicator-password-0123456789";
const REMOTE: &str = "sealed-remote-name";

/// Every regular file under `dir`.
fn files(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut found = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(dir) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                pending.push(path);
            } else if path.is_file() {
                found.push(path);
            }
        }
    }
    found
}

/// The files under `dirs` that contain `needle`.
fn holding(dirs: &[&Path], needle: &str) -> Vec<String> {
    dirs.iter()
        .flat_map(|dir| files(dir))
        .filter(|path| {
            std::fs::read(path).is_ok_and(|bytes| {
                bytes
                    .windows(needle.len())
                    .any(|window| window == needle.as_bytes())
            })
        })
        .map(|path| path.display().to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn remote_passwords_never_reach_the_raft_log_the_snapshot_or_the_data_node() {
    let control = ControlCluster::start_with_env(
        3,
        &[
            "--security-enabled",
            "true",
            "--raft-snapshot-threshold",
            "4",
        ],
        &[("NARAD_ADMIN_PASSWORD", ADMIN_PASSWORD)],
    )
    .await;
    control.wait_for_leader().await;
    let mut data = DataProcess::new(&control, 1, &["--remotes-api-hop-encrypted", "true"]);
    data.spawn_ready(true).await;
    // The root admin is seeded once the control plane first leads.
    data.wait_until("the root admin", || async {
        let answer = data.request(Some(ADMIN), "GET", "/v1/remotes", "").await;
        answer.filter(|(status, _)| *status == 200).map(drop)
    })
    .await;
    let call = |method: &'static str, path: &'static str, body: String| {
        let data = &data;
        async move {
            data.request(Some(ADMIN), method, path, &body)
                .await
                .unwrap_or_else(|| panic!("{method} {path}: no answer"))
        }
    };
    let created = call(
        "POST",
        "/v1/remotes",
        format!(
            r#"{{"name":"{REMOTE}","url":"https://dr.example.com","username":"replicator","password":"{FIRST_PASSWORD}"}}"#
        ),
    )
    .await;
    assert_eq!(created.0, 201, "{}", created.1);
    let changed = call(
        "PATCH",
        "/v1/remotes/sealed-remote-name",
        format!(r#"{{"password":"{SECOND_PASSWORD}"}}"#),
    )
    .await;
    assert_eq!(changed.0, 200, "{}", changed.1);
    // More entries than the snapshot threshold after the remote's.
    for n in 0..6 {
        let topic = call("POST", "/v1/topics", format!(r#"{{"name":"after-{n}"}}"#)).await;
        assert_eq!(topic.0, 201, "{}", topic.1);
    }
    let leader = control.wait_for_leader().await;
    let applied = control
        .statuses()
        .await
        .into_iter()
        .find(|(index, _)| *index == leader)
        .map(|(_, status)| status.applied_index)
        .expect("the leader's status");
    let deadline = std::time::Instant::now() + WAIT_MAX;
    loop {
        let snapshot = control
            .statuses()
            .await
            .into_iter()
            .map(|(_, status)| status.snapshot_index)
            .max()
            .unwrap_or(0);
        if snapshot >= applied.saturating_sub(4) && snapshot > 0 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no snapshot past index {applied} (latest {snapshot})"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }

    let dirs: Vec<&Path> = control
        .nodes
        .iter()
        .map(|node| node.data_dir())
        .chain(std::iter::once(data.data_dir.as_path()))
        .collect();
    let with_name = holding(&dirs, REMOTE);
    assert!(
        with_name.iter().any(|path| path.ends_with("raft.redb")),
        "the remote's name is in the Raft database: {with_name:?}"
    );
    for password in [FIRST_PASSWORD, SECOND_PASSWORD] {
        let found = holding(&dirs, password);
        assert!(found.is_empty(), "a password is in {found:?}");
    }

    // The credential opens on the data node, which serves its series.
    let (status, metrics) = call("GET", "/metrics", String::new()).await;
    assert_eq!(status, 200);
    assert!(
        metrics.contains(&format!(
            "narad_remote_credential_state{{remote=\"{REMOTE}\",state=\"readable\"}} 1"
        )),
        "{metrics}"
    );
    assert!(
        metrics.contains(&format!(
            "narad_remote_credential_version{{remote=\"{REMOTE}\"}} 2"
        )),
        "{metrics}"
    );
    assert_served_when(&metrics, "remotes", "a data node with a remote");
}
