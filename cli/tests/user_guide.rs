//! The command-line examples of docs/user-guide.md run: every fenced `sh`
//! block of its "The `narad` command line" section, in order, against a
//! `narad dev --secure` of their own, must exit 0.

#[path = "support/mod.rs"]
mod support;

use std::path::Path;
use std::process::Command;

/// The section whose examples are run, up to the next `## ` heading.
const SECTION: &str = "## The `narad` command line";

/// The `sh` blocks of the section.
fn examples(guide: &str) -> Vec<String> {
    let start = guide
        .find(SECTION)
        .expect("the CLI section is in the user guide");
    let section = &guide[start + SECTION.len()..];
    let section = section.find("\n## ").map_or(section, |end| &section[..end]);
    let mut blocks = Vec::new();
    let mut current: Option<String> = None;
    for line in section.lines() {
        match (&mut current, line.trim_end()) {
            (None, "```sh") => current = Some(String::new()),
            (Some(block), "```") => {
                blocks.push(std::mem::take(block));
                current = None;
            }
            (Some(block), line) => {
                block.push_str(line);
                block.push('\n');
            }
            (None, _) => {}
        }
    }
    assert!(current.is_none(), "an unclosed sh block");
    blocks
}

#[test]
fn the_cli_examples_of_the_user_guide_run() {
    let guide_path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/user-guide.md");
    let guide = std::fs::read_to_string(&guide_path).expect("the user guide");
    let blocks = examples(&guide);
    assert!(blocks.len() >= 9, "only {} sh examples", blocks.len());
    let server = support::shared();
    let work = support::temp_dir();
    let bin_dir = Path::new(support::NARAD)
        .parent()
        .expect("the binary's directory");
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    for block in &blocks {
        let mut command = Command::new("sh");
        command
            .args(["-ec", block])
            .current_dir(&work)
            .env("PATH", &path);
        for (name, value) in server.narad().get_envs() {
            match value {
                Some(value) => command.env(name, value),
                None => command.env_remove(name),
            };
        }
        let output = command.output().expect("sh runs");
        assert!(
            output.status.success(),
            "this example failed ({}):\n{block}\nstdout:\n{}\nstderr:\n{}",
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    assert!(
        work.join("bench.png").is_file(),
        "the bench example drew its chart"
    );
    assert!(
        work.join("narad.bash").is_file(),
        "the completion example wrote its script"
    );
}

#[test]
fn examples_are_found_in_order() {
    let guide = "x\n## The `narad` command line\n```sh\na\n```\n```text\nb\n```\n```sh\nc\nd\n```\n## Next\n```sh\ne\n```\n";
    assert_eq!(examples(guide), vec!["a\n".to_owned(), "c\nd\n".to_owned()]);
}
