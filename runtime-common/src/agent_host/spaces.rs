//! The host's shared context space requests (§12): `space create|show|set|history`.

use a2acp_core::agent::{Command, Input, NotifyKind};
use a2acp_core::packet::Context;
use a2acp_core::space::{own_prefix, FieldValue, SpaceLink, SpaceParticipant, SpacePermission};
use a2acp_core::{Address, Timestamp};
use serde_json::Value;

use super::{AgentHost, Effect, HostError};
use crate::control::{Response, SpaceFieldLine, SpaceMember, SpaceView};

type Answer = Result<(Response, Vec<Effect>), HostError>;

impl AgentHost {
    pub(super) fn space_create(
        &mut self,
        now: Timestamp,
        name: String,
        members: Vec<SpaceMember>,
        fields: Option<Context>,
    ) -> Answer {
        let mut participants = Vec::with_capacity(members.len());
        for m in members {
            let address = match Address::parse(&m.address) {
                Ok(a) => a,
                Err(e) => return Ok((Response::err(format!("`{}`: {e}", m.address)), Vec::new())),
            };
            let Some(permission) = SpacePermission::parse(&m.permission) else {
                return Ok((
                    Response::err(format!(
                        "`{}`: the permission is read_all, write_own_fields or full_write",
                        m.permission
                    )),
                    Vec::new(),
                ));
            };
            participants.push(SpaceParticipant {
                address,
                permission,
            });
        }
        let before: Vec<String> = self.agent.spaces().keys().cloned().collect();
        let e = self.handle(
            now,
            Input::Command(Command::CreateSpace {
                name,
                participants,
                fields: fields.unwrap_or_default(),
            }),
        )?;
        let created = self
            .agent
            .spaces()
            .values()
            .find(|s| !before.iter().any(|b| b == s.id()));
        let r = match created {
            Some(s) => Response::ok(SpaceView::from(s)),
            None => Response::err(self.last_notice("the agent refused it")),
        };
        Ok((r, e))
    }

    pub(super) fn space_show(&self, id: Option<&str>) -> Response {
        match id {
            None => {
                let v: Vec<SpaceView> = self.agent.spaces().values().map(SpaceView::from).collect();
                Response::ok(v)
            }
            Some(id) => match self.agent.space(id) {
                Some(s) => Response::ok(SpaceView::from(s)),
                None => Response::err(format!("no space `{id}`")),
            },
        }
    }

    pub(super) fn space_history(&self, id: &str) -> Response {
        match self.agent.space(id) {
            Some(s) => {
                let v: Vec<SpaceFieldLine> = s
                    .replica
                    .history()
                    .into_iter()
                    .map(SpaceFieldLine::from)
                    .collect();
                Response::ok(v)
            }
            None => Response::err(format!("no space `{id}`")),
        }
    }

    pub(super) fn space_set(
        &mut self,
        now: Timestamp,
        id: &str,
        field: &str,
        value: Option<Value>,
        link: Option<String>,
        title: Option<String>,
    ) -> Answer {
        if self.agent.space(id).is_none() {
            return Ok((Response::err(format!("no space `{id}`")), Vec::new()));
        }
        let field = match field.strip_prefix("~/") {
            Some(rest) => format!("{}{rest}", own_prefix(self.agent.address())),
            None => field.to_string(),
        };
        let value = match (value, link) {
            (Some(_), Some(_)) => {
                return Ok((
                    Response::err("give a value or --link, not both"),
                    Vec::new(),
                ))
            }
            (Some(v), None) => FieldValue::Value { value: v },
            (None, Some(uri)) => FieldValue::Link {
                link: SpaceLink {
                    title: title.unwrap_or_else(|| field.clone()),
                    uri,
                },
            },
            (None, None) => FieldValue::Cleared,
        };
        let before = self.agent.space(id).map(|s| s.replica.len()).unwrap_or(0);
        let e = self.handle(
            now,
            Input::Command(Command::SetSpaceField {
                space_id: id.to_string(),
                field: field.clone(),
                value,
            }),
        )?;
        let after = self.agent.space(id).map(|s| s.replica.len()).unwrap_or(0);
        let r = if after > before {
            Response::ok(format!("{field} written to space {id}"))
        } else {
            Response::err(self.last_notice("the agent refused it"))
        };
        Ok((r, e))
    }

    /// The text of the latest notification of a refusal, or `default`.
    fn last_notice(&self, default: &str) -> String {
        self.notifications
            .back()
            .filter(|n| n.notification.kind == NotifyKind::Delivery)
            .map(|n| n.notification.text.clone())
            .unwrap_or_else(|| default.to_string())
    }
}
