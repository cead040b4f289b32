//! The `narad` client verbs driven as a user drives them: the real binary
//! against one real `narad dev --secure` shared by every test here. Each
//! test uses its own topic and user names.

#[path = "../support/mod.rs"]
mod support;

mod admin;
mod json;
mod local;
mod pubsub;
mod remote;
mod terminal;
mod topic;
