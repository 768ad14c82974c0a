//! Byte encodings used on the wire: base64url without padding (RFC 4648 §5).

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;

/// Encodes bytes as base64url without padding.
pub fn b64_encode(bytes: &[u8]) -> String {
    URL_SAFE_NO_PAD.encode(bytes)
}

/// Decodes base64url without padding; `None` on any invalid character or length.
pub fn b64_decode(s: &str) -> Option<Vec<u8>> {
    URL_SAFE_NO_PAD.decode(s).ok()
}

/// Serde adapter for `Vec<u8>` as a base64url string.
pub mod b64_vec {
    use serde::{Deserialize, Deserializer, Serializer};

    /// Serialises bytes as base64url.
    pub fn serialize<S: Serializer>(v: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&super::b64_encode(v))
    }

    /// Deserialises base64url into bytes.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        let s = std::borrow::Cow::<str>::deserialize(d)?;
        super::b64_decode(&s).ok_or_else(|| serde::de::Error::custom("invalid base64url"))
    }
}

/// Serde adapter for `[u8; N]` as a base64url string of exactly N bytes.
pub mod b64_array {
    use serde::{Deserialize, Deserializer, Serializer};

    /// Serialises a fixed-size byte array as base64url.
    pub fn serialize<S: Serializer, const N: usize>(v: &[u8; N], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&super::b64_encode(v))
    }

    /// Deserialises base64url into exactly `N` bytes.
    pub fn deserialize<'de, D: Deserializer<'de>, const N: usize>(
        d: D,
    ) -> Result<[u8; N], D::Error> {
        let s = std::borrow::Cow::<str>::deserialize(d)?;
        let v =
            super::b64_decode(&s).ok_or_else(|| serde::de::Error::custom("invalid base64url"))?;
        v.try_into()
            .map_err(|_| serde::de::Error::custom(format!("expected {N} bytes")))
    }
}

/// Serde adapter for `Option<[u8; N]>` as an optional base64url string.
pub mod b64_opt_array {
    use serde::{Deserialize, Deserializer, Serializer};

    /// Serialises an optional fixed-size byte array.
    pub fn serialize<S: Serializer, const N: usize>(
        v: &Option<[u8; N]>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        match v {
            Some(b) => s.serialize_some(&super::b64_encode(b)),
            None => s.serialize_none(),
        }
    }

    /// Deserialises an optional base64url string of exactly `N` bytes.
    pub fn deserialize<'de, D: Deserializer<'de>, const N: usize>(
        d: D,
    ) -> Result<Option<[u8; N]>, D::Error> {
        let s = Option::<std::borrow::Cow<str>>::deserialize(d)?;
        match s {
            None => Ok(None),
            Some(s) => {
                let v = super::b64_decode(&s)
                    .ok_or_else(|| serde::de::Error::custom("invalid base64url"))?;
                v.try_into()
                    .map(Some)
                    .map_err(|_| serde::de::Error::custom(format!("expected {N} bytes")))
            }
        }
    }
}
