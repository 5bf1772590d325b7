//! Snapshot headers as S3 user metadata (`x-amz-meta-*`), as S3 counts
//! and returns them.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use object_store::{Attribute, AttributeValue, Attributes};

use super::super::object::ObjectHeaders;

/// A header value as S3 user metadata can carry it: printable ASCII as is,
/// anything else (a label in another script, edge spaces) as RFC 2047
/// `=?UTF-8?B?...?=`, the form S3 itself returns non-ASCII metadata in.
pub fn encode_metadata_value(value: &str) -> String {
    let plain = value.bytes().all(|b| (0x20..0x7f).contains(&b))
        && value.trim() == value
        && !value.starts_with("=?");
    if plain {
        value.to_string()
    } else {
        format!("=?UTF-8?B?{}?=", BASE64.encode(value))
    }
}

/// Back from [`encode_metadata_value`]; other values are returned as
/// they are.
pub fn decode_metadata_value(value: &str) -> String {
    value
        .strip_prefix("=?UTF-8?B?")
        .or_else(|| value.strip_prefix("=?utf-8?b?"))
        .and_then(|v| v.strip_suffix("?="))
        .and_then(|b64| BASE64.decode(b64).ok())
        .and_then(|bytes| String::from_utf8(bytes).ok())
        .unwrap_or_else(|| value.to_string())
}

/// The metadata of an object: every header, its name lowercased.
pub fn metadata_attributes(headers: &ObjectHeaders) -> Attributes {
    headers
        .to_pairs()
        .into_iter()
        .map(|(name, value)| {
            (
                Attribute::Metadata(name.to_ascii_lowercase().into()),
                AttributeValue::from(encode_metadata_value(&value)),
            )
        })
        .collect()
}

/// Bytes of user metadata as S3 counts them: names (without
/// `x-amz-meta-`) and values as sent.
pub fn metadata_bytes(attributes: &Attributes) -> usize {
    attributes
        .iter()
        .map(|(name, value)| match name {
            Attribute::Metadata(n) => n.len() + value.len(),
            _ => 0,
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    #[test]
    fn metadata_values_survive_http_headers() {
        for value in [
            "signal",
            "",
            "role=db,zone=a",
            "zürich",
            " edge ",
            "=?not?=",
        ] {
            let encoded = encode_metadata_value(value);
            assert!(
                encoded.bytes().all(|b| (0x20..0x7f).contains(&b)),
                "{encoded:?}"
            );
            assert_eq!(decode_metadata_value(&encoded), value);
        }
        assert_eq!(encode_metadata_value("signal"), "signal");
        assert_eq!(encode_metadata_value("zürich"), "=?UTF-8?B?esO8cmljaA==?=");
    }

    #[test]
    fn metadata_is_counted_as_s3_counts_it() {
        let headers = ObjectHeaders {
            host: "h".into(),
            id: "i".into(),
            label: String::new(),
            trigger: "signal".into(),
            bytes: 10,
            compressed: true,
            created_unix_ns: 5,
            labels: BTreeMap::from([("k".to_string(), "ü".to_string())]),
            digest: String::new(),
        };
        let attributes = metadata_attributes(&headers);
        // Names: flightrec-{host,id,labels,trigger,label,created-unix-ns,
        // bytes,compressed,digest}; values: "h", "i",
        // "=?UTF-8?B?eyJrIjoiw7wifQ==?=" ({"k":"ü"}),
        // "signal", "", "5", "10", "true", "".
        let names = [4, 2, 6, 7, 5, 15, 5, 10, 6].iter().sum::<usize>() + 9 * "flightrec-".len();
        let values = 1 + 1 + 28 + 6 + 1 + 2 + 4;
        assert_eq!(metadata_bytes(&attributes), names + values);
    }
}
