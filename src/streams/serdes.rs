//! Turning record bytes into typed keys and values: the counterpart of the
//! producer's [`Serializer`](crate::producer::Serializer).

use std::marker::PhantomData;

use bytes::Bytes;

use crate::error::{Error, Result};

/// Decodes bytes read from `topic`. A null value is given as empty bytes.
pub trait Deserializer: Send + Sync + 'static {
    /// The decoded type.
    type Output: Send + 'static;
    /// Decodes `data`; an error names the topic.
    fn deserialize(&self, topic: &str, data: &Bytes) -> Result<Self::Output>;

    /// Decodes `data`, given by value: a deserializer that can keep the
    /// bytes themselves ([`BytesDeserializer`]) overrides this to hand them
    /// on without a reference-count round trip. The default decodes by
    /// reference. A topology's source calls this form, since it owns each
    /// fetched record.
    fn deserialize_owned(&self, topic: &str, data: Bytes) -> Result<Self::Output> {
        self.deserialize(topic, &data)
    }
}

/// Bytes as they are (no copy).
#[derive(Debug, Clone, Copy, Default)]
pub struct BytesDeserializer;

impl Deserializer for BytesDeserializer {
    type Output = Bytes;
    fn deserialize(&self, _: &str, data: &Bytes) -> Result<Bytes> {
        Ok(data.clone())
    }

    fn deserialize_owned(&self, _: &str, data: Bytes) -> Result<Bytes> {
        Ok(data)
    }
}

/// UTF-8 strings.
#[derive(Debug, Clone, Copy, Default)]
pub struct StringDeserializer;

impl Deserializer for StringDeserializer {
    type Output = String;
    fn deserialize(&self, topic: &str, data: &Bytes) -> Result<String> {
        String::from_utf8(data.to_vec()).map_err(|e| deserialization_error(topic, e))
    }
}

/// JSON into any `serde::Deserialize` type.
#[cfg(feature = "serde")]
#[derive(Debug, Clone, Copy, Default)]
pub struct JsonDeserializer<T>(PhantomData<fn() -> T>);

#[cfg(feature = "serde")]
impl<T> JsonDeserializer<T> {
    /// A JSON deserializer for `T`.
    pub fn new() -> Self {
        JsonDeserializer(PhantomData)
    }
}

#[cfg(feature = "serde")]
impl<T: serde::de::DeserializeOwned + Send + 'static> Deserializer for JsonDeserializer<T> {
    type Output = T;
    fn deserialize(&self, topic: &str, data: &Bytes) -> Result<T> {
        serde_json::from_slice(data).map_err(|e| deserialization_error(topic, e))
    }
}

/// A deserializer from a closure.
pub struct FnDeserializer<T, F>(F, PhantomData<fn() -> T>);

impl<T, F> FnDeserializer<T, F> {
    /// Wraps `f`.
    pub fn new(f: F) -> Self {
        FnDeserializer(f, PhantomData)
    }
}

impl<T: Send + 'static, F> Deserializer for FnDeserializer<T, F>
where
    F: Fn(&str, &Bytes) -> Result<T> + Send + Sync + 'static,
{
    type Output = T;
    fn deserialize(&self, topic: &str, data: &Bytes) -> Result<T> {
        (self.0)(topic, data)
    }
}

fn deserialization_error(topic: &str, reason: impl ToString) -> Error {
    Error::Serialization {
        topic: topic.to_owned(),
        part: "record (deserializing)",
        reason: reason.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_and_bytes() {
        let b = Bytes::from_static("día".as_bytes());
        assert_eq!(StringDeserializer.deserialize("t", &b).unwrap(), "día");
        assert_eq!(BytesDeserializer.deserialize("t", &b).unwrap(), b);
        let bad = Bytes::from_static(&[0xff]);
        let e = StringDeserializer.deserialize("orders", &bad).unwrap_err();
        assert!(e.to_string().contains("orders"));
    }
}
