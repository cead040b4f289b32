//! `narad remote`: add, list, describe, change, test, re-encrypt and
//! delete a remote on the shared `narad dev --secure` (its remote
//! credentials sealed under a per-process secret).

use crate::support::{exits, fails, ok, shared};

const PASSWORD: &str = "replicator-password-0123456789";

#[test]
fn a_remote_is_added_listed_changed_and_deleted_without_showing_its_password() {
    let server = shared();
    let added = ok(&server.run_with_input(
        &[
            "remote",
            "add",
            "rm-dr",
            "--url",
            "https://DR.example.com/",
            "--username",
            "replicator",
            "--remote-password-stdin",
            "--max-in-flight",
            "4",
        ],
        &format!("{PASSWORD}\n"),
    ));
    assert!(
        added.contains("remote rm-dr added: https://dr.example.com as replicator"),
        "{added}"
    );
    assert!(!added.contains(PASSWORD), "{added}");
    let listing = ok(&server.run(&["remote", "ls"]));
    let row = listing
        .lines()
        .find(|line| line.contains("rm-dr"))
        .unwrap_or_else(|| panic!("rm-dr missing from:\n{listing}"));
    assert!(row.contains("v1 readable"), "{row}");
    assert!(
        listing.contains("this node's secret derives it"),
        "{listing}"
    );
    let info = ok(&server.run(&["remote", "info", "rm-dr", "--json"]));
    let remote: serde_json::Value = serde_json::from_str(&info).expect("JSON");
    assert_eq!(remote["limits"]["max_in_flight"], 4);
    assert!(!info.contains(PASSWORD));

    let error = fails(
        &server.run(&[
            "remote",
            "edit",
            "rm-dr",
            "--url",
            "https://dr2.example.com",
        ]),
        1,
    );
    assert!(error.contains("server answered 400"), "{error}");
    assert!(error.contains("needs the password again"), "{error}");
    let changed = ok(&server.run_with_input(
        &[
            "remote",
            "set",
            "rm-dr",
            "--url",
            "https://dr2.example.com",
            "--remote-password-stdin",
        ],
        &format!("{PASSWORD}-2\n"),
    ));
    assert!(
        changed.contains("revision 2, credential version 2"),
        "{changed}"
    );

    // The credential opens on the node; the host may not resolve here, so
    // the verdict may be either, but the credential check passes.
    let tested = server.run(&["remote", "test", "rm-dr", "--topic", "orders"]);
    let report = String::from_utf8_lossy(&tested.stdout).into_owned();
    let credential = report
        .lines()
        .find(|line| line.trim_start().starts_with("credential"))
        .unwrap_or_else(|| panic!("no credential check in:\n{report}"));
    assert!(credential.contains("pass"), "{credential}");
    let code = tested.status.code();
    assert!(code == Some(0) || code == Some(1), "{code:?}");

    let reencrypted = ok(&server.run(&["remote", "reencrypt"]));
    assert!(reencrypted.contains("0 re-encrypted"), "{reencrypted}");

    ok(&server.run(&["remote", "rm", "rm-dr"]));
    let error = fails(&server.run(&["remote", "info", "rm-dr"]), 1);
    assert!(error.contains("404"), "{error}");
    assert!(error.contains("`narad remote ls`"), "{error}");
}

#[test]
fn a_plain_http_remote_is_refused_with_the_reason() {
    let server = shared();
    let error = fails(
        &server.run(&[
            "remote",
            "add",
            "rm-plain",
            "--url",
            "http://dr.example.com",
            "--username",
            "u",
            "--remote-password",
            PASSWORD,
        ]),
        1,
    );
    assert!(error.contains("server answered 400"), "{error}");
    assert!(error.contains("must use https"), "{error}");
    assert!(!error.contains(PASSWORD), "{error}");
    exits(&server.run(&["remote", "info", "rm-plain"]), 1);
}
