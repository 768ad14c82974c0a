//! What the control socket answers about shared context spaces (§12), and how the CLI
//! shows it.

use a2acp_core::agent::Space;
use a2acp_core::space::{FieldValue, SpaceUpdate};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A participant as `space create` names it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SpaceMember {
    /// The agent.
    pub address: String,
    /// `read_all`, `write_own_fields` or `full_write`.
    pub permission: String,
}

impl SpaceMember {
    /// `ADDRESS` or `ADDRESS=PERMISSION` (the CLI's `--with`); `full_write` by default.
    pub fn parse(arg: &str) -> Result<Self, String> {
        let (address, permission) = match arg.rsplit_once('=') {
            Some((a, p)) => (a, p),
            None => (arg, "full_write"),
        };
        if a2acp_core::space::SpacePermission::parse(permission).is_none() {
            return Err(format!(
                "`{arg}`: the permission is read_all, write_own_fields or full_write"
            ));
        }
        Ok(SpaceMember {
            address: address.to_string(),
            permission: permission.to_string(),
        })
    }
}

/// One update as `space show` and `space history` list it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SpaceFieldLine {
    /// The field.
    pub field: String,
    /// What was written: `{"kind":"value","value":…}`, `{"kind":"link",…}`,
    /// `{"kind":"cleared"}`.
    pub value: FieldValue,
    /// The field's version this update has.
    pub version: u64,
    /// Who wrote it.
    pub writer: String,
    /// When (RFC 3339).
    pub timestamp: String,
    /// The update's id.
    pub update_id: String,
}

impl From<&SpaceUpdate> for SpaceFieldLine {
    fn from(u: &SpaceUpdate) -> Self {
        SpaceFieldLine {
            field: u.field.clone(),
            value: u.value.clone(),
            version: u.version,
            writer: u.writer.to_string(),
            timestamp: u.timestamp.to_rfc3339(),
            update_id: u.update_id.clone(),
        }
    }
}

/// A space as `space show` gives it (the §12 document).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SpaceView {
    /// `spc_…`.
    pub space_id: String,
    /// Its name.
    pub name: String,
    /// Its creator.
    pub creator: String,
    /// When it was created.
    pub created: String,
    /// Everyone, the creator first.
    pub participants: Vec<SpaceMember>,
    /// Updates applied (the space's version).
    pub version: u64,
    /// The writer of the latest update.
    #[serde(default)]
    pub last_modified_by: Option<String>,
    /// Always `last_write_wins_per_field`.
    pub conflict_resolution: String,
    /// The current fields, by name.
    pub fields: Vec<SpaceFieldLine>,
}

impl From<&Space> for SpaceView {
    fn from(s: &Space) -> Self {
        let r = &s.replica;
        let d = &r.definition;
        SpaceView {
            space_id: d.space_id.clone(),
            name: d.name.clone(),
            creator: d.creator.to_string(),
            created: d.created.to_rfc3339(),
            participants: d
                .participants
                .iter()
                .map(|p| SpaceMember {
                    address: p.address.to_string(),
                    permission: p.permission.as_str().to_string(),
                })
                .collect(),
            version: r.space_version(),
            last_modified_by: r.last_modified_by().map(|a| a.to_string()),
            conflict_resolution: "last_write_wins_per_field".into(),
            fields: r
                .fields()
                .values()
                .map(|u| SpaceFieldLine::from(*u))
                .collect(),
        }
    }
}

fn value_text(v: &FieldValue) -> String {
    match v {
        FieldValue::Value { value } => match value {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        },
        FieldValue::Link { link } => format!("{} <{}>", link.title, link.uri),
        FieldValue::Cleared => "(cleared)".into(),
    }
}

/// `space show ID`.
pub fn render_space(s: &SpaceView) -> String {
    let mut out = format!("{} “{}”\n", s.space_id, s.name);
    out += &format!("  created by {} at {}\n", s.creator, s.created);
    for p in &s.participants {
        out += &format!("  {:<34} {}\n", p.address, p.permission);
    }
    out += &format!(
        "  version {}{}\n",
        s.version,
        s.last_modified_by
            .as_deref()
            .map(|w| format!(", last modified by {w}"))
            .unwrap_or_default()
    );
    if s.fields.is_empty() {
        out += "  no fields yet\n";
    }
    for f in &s.fields {
        out += &format!(
            "  {} = {}   (v{}, {})\n",
            f.field,
            value_text(&f.value),
            f.version,
            f.writer
        );
    }
    out
}

/// `space show` without an id: one line per space.
pub fn render_spaces(v: &[SpaceView]) -> String {
    if v.is_empty() {
        return "no spaces yet (`a2acp space create NAME --with ADDRESS`)".into();
    }
    v.iter()
        .map(|s| {
            format!(
                "{}  “{}”  {} participant(s), {} field(s), version {}",
                s.space_id,
                s.name,
                s.participants.len(),
                s.fields.len(),
                s.version
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// `space history ID`.
pub fn render_space_history(v: &[SpaceFieldLine]) -> String {
    if v.is_empty() {
        return "no updates yet".into();
    }
    v.iter()
        .map(|f| {
            format!(
                "{}  {}  {} = {}  (v{})",
                f.timestamp,
                f.writer,
                f.field,
                value_text(&f.value),
                f.version
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}
