//! AWS Signature Version 4 (`AWS4-HMAC-SHA256`), the parts a presigned GET
//! URL needs: canonical request, string to sign, signing key, signature.
//! Pure functions, unit-tested against cases of AWS's published SigV4 test
//! suite (`testdata/README.md`).
//!
//! Reference: AWS General Reference, "Signature Version 4 signing process"
//! and "Authenticating Requests: Using Query Parameters".

use std::time::{SystemTime, UNIX_EPOCH};

use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};

/// The algorithm name SigV4 puts in the string to sign and the query.
pub const ALGORITHM: &str = "AWS4-HMAC-SHA256";

/// Lower-case hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(DIGITS[usize::from(b >> 4)] as char);
        out.push(DIGITS[usize::from(b & 0xf)] as char);
    }
    out
}

/// Hex SHA-256 of `data` (the payload hash; of `""` for a GET).
pub fn sha256_hex(data: &[u8]) -> String {
    hex(&Sha256::digest(data))
}

fn hmac(key: &[u8], msg: &[u8]) -> [u8; 32] {
    // HMAC accepts keys of any length, so `new_from_slice` cannot fail.
    let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes any key length");
    mac.update(msg);
    mac.finalize().into_bytes().into()
}

/// SigV4's URI encoding: every byte except `A-Z a-z 0-9 - _ . ~` becomes
/// `%XX` (upper-case hex); `/` too (query strings encode it).
pub fn uri_encode(s: &str) -> String {
    const UPPER: &[u8; 16] = b"0123456789ABCDEF";
    let mut out = String::with_capacity(s.len());
    for &b in s.as_bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push('%');
            out.push(UPPER[usize::from(b >> 4)] as char);
            out.push(UPPER[usize::from(b & 0xf)] as char);
        }
    }
    out
}

/// The canonical query string: each name and value URI-encoded, sorted by
/// encoded name (then value), joined with `&`.
pub fn canonical_query(params: &[(&str, &str)]) -> String {
    let mut encoded: Vec<(String, String)> = params
        .iter()
        .map(|(k, v)| (uri_encode(k), uri_encode(v)))
        .collect();
    encoded.sort();
    encoded
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join("&")
}

/// The canonical request. `headers` are (lower-case name, trimmed value)
/// pairs, already sorted by name; they are all signed.
pub fn canonical_request(
    method: &str,
    path: &str,
    params: &[(&str, &str)],
    headers: &[(&str, &str)],
    payload_hash: &str,
) -> String {
    let mut out = format!("{method}\n{path}\n{}\n", canonical_query(params));
    for (name, value) in headers {
        out.push_str(&format!("{name}:{value}\n"));
    }
    out.push('\n');
    out.push_str(&signed_headers(headers));
    out.push('\n');
    out.push_str(payload_hash);
    out
}

/// `host;x-amz-date`: the signed header names, `;`-joined.
pub fn signed_headers(headers: &[(&str, &str)]) -> String {
    headers
        .iter()
        .map(|(n, _)| *n)
        .collect::<Vec<_>>()
        .join(";")
}

/// The string to sign for `canonical_request` at `amz_date`
/// (`YYYYMMDDTHHMMSSZ`) in `scope` (`date/region/service/aws4_request`).
pub fn string_to_sign(amz_date: &str, scope: &str, canonical_request: &str) -> String {
    format!(
        "{ALGORITHM}\n{amz_date}\n{scope}\n{}",
        sha256_hex(canonical_request.as_bytes())
    )
}

/// The credential scope: `YYYYMMDD/region/service/aws4_request`.
pub fn scope(date: &str, region: &str, service: &str) -> String {
    format!("{date}/{region}/{service}/aws4_request")
}

/// Hex signature of `string_to_sign` with the key derived from the secret
/// access key, the date (`YYYYMMDD`), region and service.
pub fn signature(
    secret_key: &str,
    date: &str,
    region: &str,
    service: &str,
    string_to_sign: &str,
) -> String {
    let k_date = hmac(format!("AWS4{secret_key}").as_bytes(), date.as_bytes());
    let k_region = hmac(&k_date, region.as_bytes());
    let k_service = hmac(&k_region, service.as_bytes());
    let k_signing = hmac(&k_service, b"aws4_request");
    hex(&hmac(&k_signing, string_to_sign.as_bytes()))
}

/// `time` as SigV4's `YYYYMMDDTHHMMSSZ` (UTC). Times before 1970 read as 1970.
pub fn amz_date(time: SystemTime) -> String {
    let secs = time
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}{m:02}{d:02}T{:02}{:02}{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// Gregorian (year, month, day) of a count of days since 1970-01-01: the
/// proleptic calendar split in 400-year eras of 146 097 days, with years
/// counted from March so the leap day falls last.
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468; // days since 0000-03-01
    let era = z / 146_097;
    let doe = z % 146_097; // day of era, 0..146096
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365; // 0..399
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100); // day of (March) year
    let mp = (5 * doy + 2) / 153; // month from March, 0..11
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    const SECRET: &str = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY";
    const EMPTY_HASH: &str = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

    /// One case of the AWS SigV4 test suite: the GET `/` request with the
    /// given query, signed with host and x-amz-date.
    fn check_suite_case(params: &[(&str, &str)], creq: &str, sts: &str, authz: &str) {
        let headers = [
            ("host", "example.amazonaws.com"),
            ("x-amz-date", "20150830T123600Z"),
        ];
        let c = canonical_request("GET", "/", params, &headers, EMPTY_HASH);
        assert_eq!(c, creq);
        let scope = scope("20150830", "us-east-1", "service");
        let s = string_to_sign("20150830T123600Z", &scope, &c);
        assert_eq!(s, sts);
        let sig = signature(SECRET, "20150830", "us-east-1", "service", &s);
        let expected = format!(
            "{ALGORITHM} Credential=AKIDEXAMPLE/{scope}, SignedHeaders={}, Signature={sig}",
            signed_headers(&headers)
        );
        assert_eq!(expected, authz);
    }

    #[test]
    fn suite_get_vanilla_query_order_key_case() {
        check_suite_case(
            &[("Param2", "value2"), ("Param1", "value1")],
            include_str!("testdata/get-vanilla-query-order-key-case.creq"),
            include_str!("testdata/get-vanilla-query-order-key-case.sts"),
            include_str!("testdata/get-vanilla-query-order-key-case.authz"),
        );
    }

    #[test]
    fn suite_get_vanilla_query_unreserved() {
        let unreserved = "-._~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
        check_suite_case(
            &[(unreserved, unreserved)],
            include_str!("testdata/get-vanilla-query-unreserved.creq"),
            include_str!("testdata/get-vanilla-query-unreserved.sts"),
            include_str!("testdata/get-vanilla-query-unreserved.authz"),
        );
    }

    #[test]
    fn encoding_keeps_only_unreserved() {
        assert_eq!(
            uri_encode("kafka-cluster:Connect"),
            "kafka-cluster%3AConnect"
        );
        assert_eq!(uri_encode("a/b+c= d"), "a%2Fb%2Bc%3D%20d");
        assert_eq!(uri_encode("é"), "%C3%A9");
    }

    #[test]
    fn dates_format_in_utc() {
        assert_eq!(amz_date(UNIX_EPOCH), "19700101T000000Z");
        let t = UNIX_EPOCH + Duration::from_secs(1_440_938_160); // the suite's date
        assert_eq!(amz_date(t), "20150830T123600Z");
        let leap = UNIX_EPOCH + Duration::from_secs(951_782_399); // 2000-02-28T23:59:59Z
        assert_eq!(amz_date(leap), "20000228T235959Z");
        assert_eq!(amz_date(leap + Duration::from_secs(1)), "20000229T000000Z");
        let new_year = UNIX_EPOCH + Duration::from_secs(1_798_761_600); // 2027-01-01
        assert_eq!(amz_date(new_year), "20270101T000000Z");
    }
}
