//! Turning typed keys and values into record bytes.
//!
//! Records carry [`Bytes`]; a [`Serializer`] produces them. Built in:
//! [`BytesSerializer`] (no copy for `Bytes`), [`StringSerializer`] (UTF-8, as
//! the Java client's `StringSerializer`) and, with the `serde` feature,
//! `JsonSerializer`.

use bytes::Bytes;

use crate::error::{Error, Result};

/// Encodes a `T` for `topic`.
pub trait Serializer<T: ?Sized> {
    /// The bytes for `data`; an error names the topic and what went wrong.
    fn serialize(&self, topic: &str, data: &T) -> Result<Bytes>;

    /// The bytes for `data`, given by value: a serializer whose output can
    /// reuse the value's own buffer (a `Bytes`, a `Vec<u8>`, a `String`)
    /// overrides this to hand it on without copying it. The default
    /// serializes by reference. The streams sink calls this form, since it
    /// owns each record it writes.
    fn serialize_owned(&self, topic: &str, data: T) -> Result<Bytes>
    where
        T: Sized,
    {
        self.serialize(topic, &data)
    }
}

/// Bytes pass through (a `Bytes` without copying).
#[derive(Debug, Clone, Copy, Default)]
pub struct BytesSerializer;

impl Serializer<Bytes> for BytesSerializer {
    fn serialize(&self, _topic: &str, data: &Bytes) -> Result<Bytes> {
        Ok(data.clone())
    }

    fn serialize_owned(&self, _topic: &str, data: Bytes) -> Result<Bytes> {
        Ok(data)
    }
}

impl Serializer<[u8]> for BytesSerializer {
    fn serialize(&self, _topic: &str, data: &[u8]) -> Result<Bytes> {
        Ok(Bytes::copy_from_slice(data))
    }
}

impl Serializer<Vec<u8>> for BytesSerializer {
    fn serialize(&self, _topic: &str, data: &Vec<u8>) -> Result<Bytes> {
        Ok(Bytes::copy_from_slice(data))
    }

    fn serialize_owned(&self, _topic: &str, data: Vec<u8>) -> Result<Bytes> {
        Ok(Bytes::from(data))
    }
}

/// Strings as UTF-8 bytes.
#[derive(Debug, Clone, Copy, Default)]
pub struct StringSerializer;

impl Serializer<str> for StringSerializer {
    fn serialize(&self, _topic: &str, data: &str) -> Result<Bytes> {
        Ok(Bytes::copy_from_slice(data.as_bytes()))
    }
}

impl Serializer<String> for StringSerializer {
    fn serialize(&self, _topic: &str, data: &String) -> Result<Bytes> {
        Ok(Bytes::copy_from_slice(data.as_bytes()))
    }

    fn serialize_owned(&self, _topic: &str, data: String) -> Result<Bytes> {
        Ok(Bytes::from(data))
    }
}

/// Any `serde::Serialize` value as JSON (feature `serde`).
#[cfg(feature = "serde")]
#[derive(Debug, Clone, Copy, Default)]
pub struct JsonSerializer;

#[cfg(feature = "serde")]
impl<T: serde::Serialize + ?Sized> Serializer<T> for JsonSerializer {
    fn serialize(&self, topic: &str, data: &T) -> Result<Bytes> {
        serde_json::to_vec(data)
            .map(Bytes::from)
            .map_err(|e| Error::Serialization {
                topic: topic.to_owned(),
                part: "key or value",
                reason: e.to_string(),
            })
    }
}

/// Serialization failures from user serializers can use this to name the
/// topic and part uniformly.
pub fn serialization_error(topic: &str, part: &'static str, reason: impl ToString) -> Error {
    Error::Serialization {
        topic: topic.to_owned(),
        part,
        reason: reason.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn built_in_serializers() {
        let b = Bytes::from_static(b"abc");
        assert_eq!(BytesSerializer.serialize("t", &b).unwrap(), b);
        assert_eq!(
            StringSerializer.serialize("t", "ключ").unwrap(),
            Bytes::from("ключ".as_bytes())
        );
    }

    #[test]
    fn owned_bytes_vectors_and_strings_keep_their_buffer() {
        let b = Bytes::from_static(b"abc");
        let out = BytesSerializer.serialize_owned("t", b.clone()).unwrap();
        assert_eq!(out.as_ptr(), b.as_ptr());
        let v = b"xyz".to_vec();
        let at = v.as_ptr();
        assert_eq!(
            BytesSerializer.serialize_owned("t", v).unwrap().as_ptr(),
            at
        );
        let s = String::from("ключ");
        let at = s.as_ptr();
        let out = StringSerializer.serialize_owned("t", s).unwrap();
        assert_eq!((out.as_ptr(), &out[..]), (at, "ключ".as_bytes()));
        // A serializer that does not override it serializes by reference.
        #[cfg(feature = "serde")]
        assert_eq!(&JsonSerializer.serialize_owned("t", 7u8).unwrap()[..], b"7");
    }

    #[cfg(feature = "serde")]
    #[test]
    fn json_serializer() {
        let v = serde_json::json!({"id": 7, "name": "x"});
        let out = JsonSerializer.serialize("t", &v).unwrap();
        assert_eq!(&out[..], br#"{"id":7,"name":"x"}"#);
        // Maps with non-string keys cannot be JSON: the error names the topic.
        let bad: std::collections::HashMap<(i32, i32), i32> = [((1, 2), 3)].into();
        let err = JsonSerializer.serialize("orders", &bad).unwrap_err();
        assert!(err.to_string().contains("orders"), "{err}");
    }
}
