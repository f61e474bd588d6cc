//! ApiVersions negotiation (KIP-35, KIP-511): pick, per API, the highest
//! version both the client and the broker support.
//!
//! Pure functions over the broker's advertised ranges; the connection layer
//! stores one [`ApiVersionTable`] per connection.

use kafka_protocol::messages::ApiVersionsResponse;

use super::frame::api_name;

/// An inclusive version range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Versions {
    /// Lowest version.
    pub min: i16,
    /// Highest version.
    pub max: i16,
}

impl Versions {
    /// `min..=max`.
    pub const fn new(min: i16, max: i16) -> Versions {
        Versions { min, max }
    }
}

/// No version of an API is shared by client and broker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VersionMismatch {
    /// The API's name.
    pub api: &'static str,
    /// What the client speaks.
    pub client: Versions,
    /// What the broker advertises (`None`: the broker does not know the API).
    pub broker: Option<Versions>,
}

impl std::fmt::Display for VersionMismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "no common version of {}: client supports {}..={}, ",
            self.api, self.client.min, self.client.max
        )?;
        match self.broker {
            Some(b) => write!(f, "broker supports {}..={}", b.min, b.max),
            None => write!(f, "broker does not support it"),
        }
    }
}

/// The API version ranges a broker advertised in its ApiVersions response.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ApiVersionTable {
    ranges: Vec<(i16, Versions)>,
    /// Finalized cluster features (e.g. `transaction.version`) and their max level.
    features: Vec<(String, i16)>,
}

impl ApiVersionTable {
    /// Builds the table from a successful ApiVersions response.
    pub fn from_response(resp: &ApiVersionsResponse) -> ApiVersionTable {
        let mut ranges: Vec<(i16, Versions)> = resp
            .api_keys
            .iter()
            .map(|k| (k.api_key, Versions::new(k.min_version, k.max_version)))
            .collect();
        ranges.sort_by_key(|(k, _)| *k);
        ranges.dedup_by_key(|(k, _)| *k);
        let features = resp
            .finalized_features
            .iter()
            .map(|f| (f.name.as_str().to_owned(), f.max_version_level))
            .collect();
        ApiVersionTable { ranges, features }
    }

    /// Builds a table from explicit ranges (tests, fakes).
    pub fn from_ranges(ranges: impl IntoIterator<Item = (i16, Versions)>) -> ApiVersionTable {
        let mut ranges: Vec<_> = ranges.into_iter().collect();
        ranges.sort_by_key(|(k, _)| *k);
        ApiVersionTable {
            ranges,
            features: Vec::new(),
        }
    }

    /// The broker's range for `api_key`, if it advertised one.
    pub fn broker_range(&self, api_key: i16) -> Option<Versions> {
        self.ranges
            .binary_search_by_key(&api_key, |(k, _)| *k)
            .ok()
            .map(|i| self.ranges[i].1)
    }

    /// Every advertised `(api_key, range)`, sorted by key.
    pub fn ranges(&self) -> &[(i16, Versions)] {
        &self.ranges
    }

    /// The finalized level of a cluster feature such as `transaction.version`.
    pub fn feature_level(&self, name: &str) -> Option<i16> {
        self.features
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, level)| *level)
    }

    /// The highest version in both `client` and the broker's range.
    pub fn pick(&self, api_key: i16, client: Versions) -> Result<i16, VersionMismatch> {
        pick_version(api_key, client, self.broker_range(api_key))
    }
}

/// The highest version in both ranges, or a mismatch naming the API and both ranges.
pub fn pick_version(
    api_key: i16,
    client: Versions,
    broker: Option<Versions>,
) -> Result<i16, VersionMismatch> {
    let mismatch = || VersionMismatch {
        api: api_name(api_key),
        client,
        broker,
    };
    let b = broker.ok_or_else(mismatch)?;
    let hi = client.max.min(b.max);
    let lo = client.min.max(b.min);
    if lo > hi {
        return Err(mismatch());
    }
    Ok(hi)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn picks_highest_common_version() {
        let t =
            ApiVersionTable::from_ranges([(3, Versions::new(0, 12)), (1, Versions::new(4, 17))]);
        assert_eq!(t.pick(3, Versions::new(1, 13)), Ok(12));
        assert_eq!(t.pick(1, Versions::new(0, 11)), Ok(11));
        assert_eq!(t.pick(1, Versions::new(17, 20)), Ok(17));
    }

    #[test]
    fn mismatch_names_api_and_both_ranges() {
        let t = ApiVersionTable::from_ranges([(0, Versions::new(9, 12))]);
        let err = t.pick(0, Versions::new(3, 8)).unwrap_err();
        assert_eq!(
            err.to_string(),
            "no common version of Produce: client supports 3..=8, broker supports 9..=12"
        );
        let err = t.pick(68, Versions::new(0, 0)).unwrap_err();
        assert_eq!(
            err.to_string(),
            "no common version of ConsumerGroupHeartbeat: client supports 0..=0, broker does not support it"
        );
    }
}
