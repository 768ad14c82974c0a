//! `retraction` and `retraction_ack` (an a2acp extension; SPEC-NOTES "Retraction"): a
//! person takes back values their agent shared in a thread, and the other agent answers
//! that it deleted them, signed.

use serde::{Deserialize, Serialize};

use super::{invalid, valid_id, WireError};
use crate::encoding::b64_array;

/// Fields one retraction may name.
pub const MAX_RETRACTED_FIELDS: usize = 64;
/// Bytes of one field name in a retraction.
pub const MAX_RETRACTED_FIELD_BYTES: usize = 256;

/// Body of `retraction`: the sender takes back the values it shared for `fields` in this
/// thread; the recipient deletes them and answers `retraction_ack`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RetractionBody {
    /// The fields taken back (1–64, each named once).
    pub fields: Vec<String>,
}

/// Body of `retraction_ack`: the recipient of `retraction_id` deleted `fields`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RetractionAckBody {
    /// The `retraction` packet answered.
    pub retraction_id: String,
    /// The fields deleted: those the retraction named.
    pub fields: Vec<String>,
    /// The sender's Ed25519 signature over
    /// [`crate::receipt::retraction::ack_bytes`].
    #[serde(with = "b64_array")]
    pub signature: [u8; 64],
}

fn check_fields(fields: &[String]) -> Result<(), WireError> {
    if fields.is_empty() || fields.len() > MAX_RETRACTED_FIELDS {
        return Err(invalid(
            "fields",
            format!("1-{MAX_RETRACTED_FIELDS} fields, got {}", fields.len()),
        ));
    }
    for (i, f) in fields.iter().enumerate() {
        if f.trim().is_empty() || f.len() > MAX_RETRACTED_FIELD_BYTES {
            return Err(invalid(
                format!("fields[{i}]"),
                format!("a field name of 1-{MAX_RETRACTED_FIELD_BYTES} bytes"),
            ));
        }
        if fields.iter().take(i).any(|x| x == f) {
            return Err(invalid(format!("fields[{i}]"), "named twice"));
        }
    }
    Ok(())
}

impl RetractionBody {
    /// Checks the field list.
    pub fn validate(&self) -> Result<(), WireError> {
        check_fields(&self.fields)
    }
}

impl RetractionAckBody {
    /// Checks the id and the field list.
    pub fn validate(&self) -> Result<(), WireError> {
        valid_id("retraction_id", &self.retraction_id)?;
        check_fields(&self.fields)
    }
}
