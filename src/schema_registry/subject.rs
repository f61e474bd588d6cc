//! Subject names and the settings the serializers share, under the keys of
//! Confluent's Java serdes (`auto.register.schemas`, `use.latest.version`,
//! `key.subject.name.strategy`, `value.subject.name.strategy`).

use std::collections::HashMap;

use super::client::RegistryError;

/// Which part of the record a serde handles.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    /// The key (subjects end in `-key`).
    Key,
    /// The value (subjects end in `-value`).
    Value,
}

impl Part {
    /// `key` or `value`, for error messages.
    pub fn name(self) -> &'static str {
        match self {
            Part::Key => "key",
            Part::Value => "value",
        }
    }

    /// The config key of this part's subject name strategy.
    pub fn strategy_key(self) -> &'static str {
        match self {
            Part::Key => "key.subject.name.strategy",
            Part::Value => "value.subject.name.strategy",
        }
    }
}

/// How a subject name is derived (Java's `SubjectNameStrategy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum SubjectNameStrategy {
    /// `<topic>-key` / `<topic>-value` (`TopicNameStrategy`, the default).
    #[default]
    Topic,
    /// The record's fully-qualified name (`RecordNameStrategy`).
    Record,
    /// `<topic>-<record name>` (`TopicRecordNameStrategy`).
    TopicRecord,
}

impl SubjectNameStrategy {
    /// Reads a Java class name (`io.confluent.kafka.serializers.subject.TopicNameStrategy`
    /// and the two others) or its short name.
    pub fn parse(key: &str, value: &str) -> Result<Self, RegistryError> {
        match value.rsplit('.').next().unwrap_or(value) {
            "TopicNameStrategy" => Ok(SubjectNameStrategy::Topic),
            "RecordNameStrategy" => Ok(SubjectNameStrategy::Record),
            "TopicRecordNameStrategy" => Ok(SubjectNameStrategy::TopicRecord),
            _ => Err(RegistryError::Config {
                key: key.to_owned(),
                reason: format!(
                    "unknown strategy `{value}`: expected TopicNameStrategy, RecordNameStrategy or TopicRecordNameStrategy"
                ),
            }),
        }
    }

    /// The subject for `topic`, `part` and the schema's record name (needed
    /// by the record strategies; an Avro schema that is not a named type
    /// has none).
    pub fn subject(&self, topic: &str, part: Part, record: Option<&str>) -> Result<String, String> {
        let record = || {
            record.ok_or_else(|| {
                format!("{self:?} name strategy needs a named record schema (Avro record, enum or fixed)")
            })
        };
        Ok(match self {
            SubjectNameStrategy::Topic => match part {
                Part::Key => format!("{topic}-key"),
                Part::Value => format!("{topic}-value"),
            },
            SubjectNameStrategy::Record => record()?.to_owned(),
            SubjectNameStrategy::TopicRecord => format!("{topic}-{}", record()?),
        })
    }
}

/// What a serializer does to find its schema id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SerdeConfig {
    /// `auto.register.schemas` (default true): register the schema under
    /// the subject; false: look it up and fail when it is not registered.
    pub auto_register_schemas: bool,
    /// `use.latest.version` (default false): write with the subject's
    /// latest registered schema instead (no registration); wins over
    /// `auto.register.schemas`, as in the Java serializer.
    pub use_latest_version: bool,
    /// `key.subject.name.strategy`.
    pub key_subject_name_strategy: SubjectNameStrategy,
    /// `value.subject.name.strategy`.
    pub value_subject_name_strategy: SubjectNameStrategy,
    /// `json.fail.invalid.schema` (default false, as in the Java serdes):
    /// `true` makes the JSON Schema serializer check every value against
    /// its schema and refuse one that does not match (feature
    /// `schema-registry-json-schema`; without it `true` is a config error).
    /// On the reading side, `ValidatingJsonSchemaDeserializer` (same
    /// feature) is the validating deserializer.
    pub json_fail_invalid_schema: bool,
}

impl Default for SerdeConfig {
    fn default() -> Self {
        SerdeConfig {
            auto_register_schemas: true,
            use_latest_version: false,
            key_subject_name_strategy: SubjectNameStrategy::Topic,
            value_subject_name_strategy: SubjectNameStrategy::Topic,
            json_fail_invalid_schema: false,
        }
    }
}

impl SerdeConfig {
    /// Reads the Java serdes' property names; others are ignored (so one map
    /// can hold the registry settings too).
    pub fn from_properties<'a>(
        props: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Result<Self, RegistryError> {
        let props: HashMap<&str, &str> = props.into_iter().collect();
        let flag = |key: &str, default: bool| -> Result<bool, RegistryError> {
            match props.get(key).map(|v| v.trim().to_ascii_lowercase()) {
                None => Ok(default),
                Some(v) if v == "true" => Ok(true),
                Some(v) if v == "false" => Ok(false),
                Some(v) => Err(RegistryError::Config {
                    key: key.to_owned(),
                    reason: format!("`{v}` is not true or false"),
                }),
            }
        };
        let strategy = |key: &str| match props.get(key) {
            Some(v) => SubjectNameStrategy::parse(key, v),
            None => Ok(SubjectNameStrategy::Topic),
        };
        let json_fail_invalid_schema = flag("json.fail.invalid.schema", false)?;
        if json_fail_invalid_schema && !cfg!(feature = "schema-registry-json-schema") {
            return Err(RegistryError::Config {
                key: "json.fail.invalid.schema".into(),
                reason: "validating JSON values against their schema needs the `schema-registry-json-schema` feature"
                    .into(),
            });
        }
        Ok(SerdeConfig {
            json_fail_invalid_schema,
            auto_register_schemas: flag("auto.register.schemas", true)?,
            use_latest_version: flag("use.latest.version", false)?,
            key_subject_name_strategy: strategy("key.subject.name.strategy")?,
            value_subject_name_strategy: strategy("value.subject.name.strategy")?,
        })
    }

    /// The strategy for `part`.
    pub fn strategy(&self, part: Part) -> SubjectNameStrategy {
        match part {
            Part::Key => self.key_subject_name_strategy,
            Part::Value => self.value_subject_name_strategy,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strategies_name_subjects_as_the_java_serdes() {
        let rec = Some("com.example.Order");
        assert_eq!(
            SubjectNameStrategy::Topic
                .subject("orders", Part::Value, rec)
                .unwrap(),
            "orders-value"
        );
        assert_eq!(
            SubjectNameStrategy::Topic
                .subject("orders", Part::Key, None)
                .unwrap(),
            "orders-key"
        );
        assert_eq!(
            SubjectNameStrategy::Record
                .subject("orders", Part::Value, rec)
                .unwrap(),
            "com.example.Order"
        );
        assert_eq!(
            SubjectNameStrategy::TopicRecord
                .subject("orders", Part::Key, rec)
                .unwrap(),
            "orders-com.example.Order"
        );
        assert!(SubjectNameStrategy::Record
            .subject("orders", Part::Value, None)
            .is_err());
    }

    #[test]
    fn properties_use_the_java_keys() {
        let c = SerdeConfig::from_properties([
            ("auto.register.schemas", "false"),
            ("use.latest.version", "TRUE"),
            (
                "value.subject.name.strategy",
                "io.confluent.kafka.serializers.subject.TopicRecordNameStrategy",
            ),
            ("key.subject.name.strategy", "RecordNameStrategy"),
            ("schema.registry.url", "http://ignored"),
        ])
        .unwrap();
        assert!(!c.auto_register_schemas && c.use_latest_version);
        assert_eq!(c.strategy(Part::Value), SubjectNameStrategy::TopicRecord);
        assert_eq!(c.strategy(Part::Key), SubjectNameStrategy::Record);
        let e =
            SerdeConfig::from_properties([("value.subject.name.strategy", "Nope")]).unwrap_err();
        assert!(e.to_string().contains("value.subject.name.strategy"), "{e}");
        let e = SerdeConfig::from_properties([("auto.register.schemas", "yes")]).unwrap_err();
        assert!(e.to_string().contains("auto.register.schemas"), "{e}");
    }
}
