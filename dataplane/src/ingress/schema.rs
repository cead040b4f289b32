//! JSON-Schema validation of produced payloads, with compiled validators
//! cached per topic incarnation and schema version.

use std::collections::HashMap;
use std::sync::Arc;

use jsonschema::Validator;
use parking_lot::Mutex;

use crate::metadata::TopicMeta;

/// Deepest payload nesting accepted on a schema topic (spec §1.3).
pub const PAYLOAD_NESTING_MAX: usize = 256;

/// Validation error texts are cut to this many bytes (spec §1.3).
pub const SCHEMA_ERROR_BYTES_MAX: usize = 2 * 1024;

/// Compiled validators kept at most; the cache is emptied when full (a
/// schema change or topic churn that large is rare, and recompiling is
/// correct, only slower).
pub const VALIDATORS_MAX: usize = 1_024;

type ValidatorKey = (Arc<str>, Option<Arc<str>>, u32);

/// Why a payload was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SchemaError {
    /// The payload nests deeper than [`PAYLOAD_NESTING_MAX`].
    #[error("payload nests deeper than 256 levels")]
    TooDeep,
    /// The payload is not one JSON text.
    #[error("schema: {0}")]
    Malformed(String),
    /// The schema refused the payload, or does not compile.
    #[error("schema: {0}")]
    Invalid(String),
}

impl SchemaError {
    /// The `reason` label of `narad_schema_rejections_total`.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::TooDeep => "depth",
            Self::Malformed(_) => "malformed",
            Self::Invalid(_) => "invalid",
        }
    }
}

/// Validators of the topics seen, compiled once.
#[derive(Debug, Default)]
pub struct SchemaCache {
    validators: Mutex<HashMap<ValidatorKey, Arc<Validator>>>,
}

impl SchemaCache {
    /// Checks `payload` against `topic`'s schema; a topic without one
    /// accepts anything.
    ///
    /// # Errors
    /// [`SchemaError`] with the text the client sees.
    pub fn check(&self, topic: &TopicMeta, payload: &[u8]) -> Result<(), SchemaError> {
        let Some(schema) = topic.schema() else {
            return Ok(());
        };
        if nesting_depth(payload) > PAYLOAD_NESTING_MAX {
            return Err(SchemaError::TooDeep);
        }
        let value = parse_one_json_text(payload).map_err(|reason| {
            SchemaError::Malformed(truncate(format!("payload is not valid JSON: {reason}")))
        })?;
        let key = (
            Arc::clone(&topic.name),
            topic.incarnation_id.clone(),
            schema.version,
        );
        let validator = self.validator(key, &schema.document)?;
        match validator.iter_errors(&value).next() {
            None => Ok(()),
            Some(error) => {
                let path = error.instance_path.to_string();
                let path = if path.is_empty() {
                    "/".to_owned()
                } else {
                    path
                };
                Err(SchemaError::Invalid(truncate(format!("{path}: {error}"))))
            }
        }
    }

    fn validator(
        &self,
        key: ValidatorKey,
        document: &serde_json::Value,
    ) -> Result<Arc<Validator>, SchemaError> {
        if let Some(validator) = self.validators.lock().get(&key) {
            return Ok(Arc::clone(validator));
        }
        // Compiled outside the lock: two racing compiles cost CPU, not
        // correctness.
        let validator = jsonschema::options()
            .should_validate_formats(true)
            .build(document)
            .map_err(|error| {
                SchemaError::Invalid(truncate(format!("topic schema does not compile: {error}")))
            })?;
        let validator = Arc::new(validator);
        let mut validators = self.validators.lock();
        if validators.len() >= VALIDATORS_MAX {
            validators.clear();
        }
        validators.insert(key, Arc::clone(&validator));
        Ok(validator)
    }
}

/// Parses exactly one JSON text: no trailing value, no BOM. The depth was
/// checked before, so the parser's own recursion limit is lifted.
fn parse_one_json_text(payload: &[u8]) -> Result<serde_json::Value, String> {
    let text = std::str::from_utf8(payload).map_err(|error| error.to_string())?;
    let mut deserializer = serde_json::Deserializer::from_str(text);
    deserializer.disable_recursion_limit();
    let value = serde::Deserialize::deserialize(&mut deserializer)
        .map_err(|error: serde_json::Error| error.to_string())?;
    deserializer.end().map_err(|error| error.to_string())?;
    Ok(value)
}

/// Deepest array/object nesting in a JSON text, strings skipped. Cheap and
/// bounded by the payload size; runs before parsing so a deep payload is
/// refused without building it.
pub fn nesting_depth(payload: &[u8]) -> usize {
    let mut depth = 0usize;
    let mut deepest = 0usize;
    let mut in_string = false;
    let mut escaped = false;
    for &byte in payload {
        if in_string {
            match (escaped, byte) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match byte {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    deepest
}

fn truncate(mut text: String) -> String {
    if text.len() > SCHEMA_ERROR_BYTES_MAX {
        let mut cut = SCHEMA_ERROR_BYTES_MAX;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        text.truncate(cut);
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metadata::MetadataReplica;
    use crate::testing::{create_command, place, register};

    /// Topic `orders` created with `schema` (`None`: without one).
    fn topic(schema: Option<serde_json::Value>) -> TopicMeta {
        let replica = MetadataReplica::new(1);
        register(&replica, 1);
        let mut create = create_command("orders", 0xaa, 3);
        create.schema = schema.map(|schema| schema.to_string());
        place(&replica, create, 1);
        let topic = replica.topic_meta("orders").expect("created");
        TopicMeta::clone(&topic)
    }

    fn topic_with(schema: serde_json::Value) -> TopicMeta {
        topic(Some(schema))
    }

    fn amount_schema() -> TopicMeta {
        topic_with(serde_json::json!({
            "type": "object",
            "properties": {"amount": {"type": "integer"}},
            "required": ["amount"]
        }))
    }

    #[test]
    fn conforming_payload_passes() {
        let cache = SchemaCache::default();
        assert_eq!(cache.check(&amount_schema(), br#"{"amount": 7}"#), Ok(()));
    }

    #[test]
    fn refusal_names_the_instance_path() {
        let cache = SchemaCache::default();
        let error = cache
            .check(&amount_schema(), br#"{"amount": 1.5}"#)
            .unwrap_err();
        let SchemaError::Invalid(text) = error else {
            panic!("expected a schema refusal");
        };
        assert!(text.starts_with("/amount: "), "{text}");
    }

    #[test]
    fn trailing_second_value_is_refused() {
        let cache = SchemaCache::default();
        assert!(
            cache
                .check(&amount_schema(), br#"{"amount": 7} {}"#)
                .is_err()
        );
    }

    #[test]
    fn payload_nested_past_the_limit_is_refused_before_parsing() {
        let cache = SchemaCache::default();
        let deep = format!("{}{}", "[".repeat(257), "]".repeat(257));
        assert_eq!(
            cache.check(&topic_with(serde_json::json!(true)), deep.as_bytes()),
            Err(SchemaError::TooDeep)
        );
    }

    #[test]
    fn payload_nested_at_the_limit_is_accepted() {
        let cache = SchemaCache::default();
        let deep = format!("{}{}", "[".repeat(256), "]".repeat(256));
        assert_eq!(
            cache.check(&topic_with(serde_json::json!(true)), deep.as_bytes()),
            Ok(())
        );
    }

    #[test]
    fn brackets_inside_strings_do_not_count_as_nesting() {
        assert_eq!(nesting_depth(br#"["[[[\"[[", {"a": "}}}"}]"#), 2);
    }

    #[test]
    fn topic_without_schema_accepts_any_bytes() {
        let cache = SchemaCache::default();
        let topic = topic(None);
        assert_eq!(cache.check(&topic, &[0xff, 0x00]), Ok(()));
    }
}
