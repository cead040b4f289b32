//! Encodings of metastore values inside control-plane messages: the
//! command a log entry or a proposal carries, topic records, and the
//! 8-byte ids. They are the metastore's own binary codecs
//! ([`narad_meta::codec`], which also reads the JSON command blob of
//! older peers); this module names the ones the messages use.

pub(crate) use narad_meta::codec::{
    PARTITION_SLOTS_MAX, get_command, get_epoch, get_incarnation, get_topic, put_command,
    put_epoch, put_incarnation, put_topic,
};
