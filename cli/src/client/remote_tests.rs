use clap::Parser;

use super::*;

#[derive(Debug, Parser)]
struct Cli {
    #[command(subcommand)]
    command: RemoteCommand,
}

fn parse(words: &[&str]) -> Result<RemoteCommand, clap::Error> {
    Cli::try_parse_from(std::iter::once("remote").chain(words.iter().copied()))
        .map(|cli| cli.command)
}

#[test]
fn limits_carry_only_what_was_given_in_milliseconds() {
    let command = parse(&[
        "add",
        "dr",
        "--url",
        "https://dr.example.com",
        "--username",
        "u",
        "--remote-password",
        "p",
        "--request-timeout",
        "45s",
        "--compression",
        "zstd",
    ])
    .expect("parses");
    let RemoteCommand::Add { options, .. } = command else {
        panic!("add");
    };
    assert_eq!(
        options.limits(),
        Some(json!({"request_timeout_ms": 45_000, "compression": "zstd"}))
    );
}

#[test]
fn no_limits_send_no_limits_object() {
    let command = parse(&["edit", "dr", "--url", "https://x.example.com"]).expect("parses");
    let RemoteCommand::Edit { options, .. } = command else {
        panic!("edit");
    };
    assert_eq!(options.limits(), None);
}

#[test]
fn add_needs_a_password_from_the_line_or_stdin() {
    let without = parse(&[
        "add",
        "dr",
        "--url",
        "https://dr.example.com",
        "--username",
        "u",
    ]);
    assert!(without.is_err());
    let both = parse(&[
        "add",
        "dr",
        "--url",
        "https://dr.example.com",
        "--username",
        "u",
        "--remote-password",
        "p",
        "--remote-password-stdin",
    ]);
    assert!(both.is_err());
}

#[test]
fn set_is_edit_and_no_ca_pem_excludes_ca_pem() {
    assert!(matches!(
        parse(&["set", "dr", "--max-in-flight", "4"]),
        Ok(RemoteCommand::Edit { .. })
    ));
    assert!(parse(&["edit", "dr", "--no-ca-pem", "--ca-pem", "x.pem"]).is_err());
    assert!(
        parse(&[
            "add",
            "dr",
            "--url",
            "u",
            "--username",
            "u",
            "--remote-password",
            "p",
            "--compression",
            "gzip"
        ])
        .is_err()
    );
}

#[test]
fn the_listing_says_when_this_node_must_reencrypt() {
    let listing = json!({
        "remotes": [{"name": "dr", "url": "https://dr.example.com", "username": "u",
                     "credential_version": 2, "password": {"key_version": 1},
                     "links": ["orders-dr"], "nodes": [{"credential": "readable"}]}],
        "key": {"version": 1, "key_id": "00aa", "node_current": false},
    });
    let text = listing_text(&listing);
    assert!(text.contains("dr"), "{text}");
    assert!(text.contains("v2 readable"), "{text}");
    assert!(text.contains("narad remote reencrypt"), "{text}");
}

#[test]
fn the_reencrypt_report_lists_failures() {
    let text = reencrypt_text(&json!({
        "key_version": 2, "reencrypted": 1, "already_current": 3,
        "failed": [{"remote": "old", "error": "sealed under key 01, which this node does not have"}],
    }));
    assert!(
        text.starts_with("remote key v2: 1 re-encrypted, 3 already current"),
        "{text}"
    );
    assert!(text.contains("old did not open"), "{text}");
}
