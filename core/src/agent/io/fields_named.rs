//! The fields a packet names, as the principal's audit log records them with each packet
//! sent or received: names, never values.

use serde::{Deserialize, Serialize};

use crate::packet::Body;

/// Field names a packet can list in the principal's audit log, per list (more are counted).
pub const MAX_FIELDS_NAMED: usize = 16;

/// The fields a packet names — asked for, given, withheld — never their values: what the
/// principal's audit log and the transparency summary say of an end-to-end encrypted
/// packet besides its type. Each name is cleaned for display and capped
/// ([`crate::display::MAX_FIELD_NAME`]); each list keeps at most [`MAX_FIELDS_NAMED`]
/// names and counts the rest.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FieldsNamed {
    /// Fields asked of the recipient (`needs`, `additional_context_needed`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub asked: Vec<String>,
    /// Fields whose values the packet gives.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub given: Vec<String>,
    /// Fields it says were withheld or are unavailable.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub withheld: Vec<String>,
    /// Names left out of the lists above (past [`MAX_FIELDS_NAMED`] each).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub more: usize,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

impl FieldsNamed {
    /// The fields `body` names.
    pub fn of(body: &Body) -> Self {
        let asked: Vec<&str> = body.needs().iter().map(|n| n.field.as_str()).collect();
        let given: Vec<&str> = body
            .provided()
            .map(|c| c.keys().map(String::as_str).collect())
            .unwrap_or_default();
        let mut withheld: Vec<&str> = Vec::new();
        let declaration = match body {
            Body::Context(b) => b.permissions.as_ref(),
            Body::ContextRequest(b) => b.permissions.as_ref(),
            Body::ContextResponse(b) => {
                withheld.extend(b.context_unavailable.iter().map(|u| u.field.as_str()));
                b.permissions.as_ref()
            }
            _ => None,
        };
        if let Some(d) = declaration {
            withheld.extend(d.withheld_fields.iter().map(String::as_str));
        }
        let mut more = 0;
        let mut list = |names: Vec<&str>| {
            let mut out: Vec<String> = Vec::new();
            for n in names {
                let n = crate::display::line(n, crate::display::MAX_FIELD_NAME).into_owned();
                if out.contains(&n) {
                    continue;
                }
                if out.len() == MAX_FIELDS_NAMED {
                    more += 1;
                } else {
                    out.push(n);
                }
            }
            out
        };
        let asked = list(asked);
        let given = list(given);
        let withheld = list(withheld);
        FieldsNamed {
            asked,
            given,
            withheld,
            more,
        }
    }

    /// Whether it names no field.
    pub fn is_empty(&self) -> bool {
        self.asked.is_empty() && self.given.is_empty() && self.withheld.is_empty()
    }
}
