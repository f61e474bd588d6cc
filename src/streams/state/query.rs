//! Interactive queries (Kafka Streams' `KafkaStreams.store`, KIP-67): a
//! typed, read-only view of a store's partitions open in this instance.
//! Other instances' partitions are not queried.

use std::any::Any;
use std::marker::PhantomData;
use std::sync::Arc;

use bytes::Bytes;

use super::registry::Stores;
use crate::error::{Error, Origin, Result};

/// Turns query keys into store bytes and store bytes into values: the
/// serdes of the stage that owns the store.
pub(crate) struct QueryCodec<K, V> {
    pub(crate) key: KeyEncoder<K>,
    pub(crate) value: ValueDecoder<V>,
}

/// A query key to store bytes.
pub(crate) type KeyEncoder<K> = Box<dyn Fn(&K) -> Result<Bytes> + Send + Sync>;
/// Store bytes to a value.
pub(crate) type ValueDecoder<V> = Box<dyn Fn(&Bytes) -> Result<V> + Send + Sync>;

/// A read-only view of store `name`'s partitions in this instance; see
/// `RunningStreams::store`.
pub struct ReadOnlyKeyValueStore<K, V> {
    name: String,
    stores: Stores,
    codec: Arc<QueryCodec<K, V>>,
    _types: PhantomData<fn() -> (K, V)>,
}

impl<K: 'static, V: 'static> ReadOnlyKeyValueStore<K, V> {
    pub(crate) fn new(stores: &Stores, name: &str) -> Result<ReadOnlyKeyValueStore<K, V>> {
        let codec: Arc<dyn Any + Send + Sync> = stores.codec(name).ok_or_else(|| {
            Error::invalid_state(
                Origin::Streams,
                format!("no stateful stage of this topology has a store named {name:?}"),
            )
        })?;
        let codec = codec.downcast::<QueryCodec<K, V>>().map_err(|_| {
            Error::invalid_state(
                Origin::Streams,
                format!(
                    "store {name:?} holds other key or value types than {} / {}",
                    std::any::type_name::<K>(),
                    std::any::type_name::<V>()
                ),
            )
        })?;
        Ok(ReadOnlyKeyValueStore {
            name: name.to_owned(),
            stores: stores.clone(),
            codec,
            _types: PhantomData,
        })
    }

    /// The value of `key` in this instance's partitions of the store
    /// (`None` when absent, or kept by a partition another instance owns),
    /// read through the stage's record cache: the latest update, written
    /// out or not.
    pub fn get(&self, key: &K) -> Result<Option<V>> {
        let k = (self.codec.key)(key)?;
        for p in self.stores.local_partitions(&self.name) {
            let Some(task) = self.stores.local(&self.name, p) else {
                continue;
            };
            let found = task
                .get(&k)
                .map_err(|e| Error::invalid_state(Origin::Streams, e.to_string()))?;
            if let Some(v) = found {
                return (self.codec.value)(&v).map(Some);
            }
        }
        Ok(None)
    }

    /// The input partitions whose store is open in this instance.
    pub fn partitions(&self) -> Vec<i32> {
        self.stores.local_partitions(&self.name)
    }
}
