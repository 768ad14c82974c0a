//! What the person sees and types: transcript lines and the terminal's prompt flow.

use a2acp_core::agent::Prompt;
use tracing::info;

use super::*;
use crate::prompt::{self, UiOut};

impl Driver {
    /// Prompts answered through the control socket leave the terminal's queue too (the
    /// host, which owns the open prompts, no longer has them).
    pub(super) fn sync_ui_after_answer(&mut self) {
        let outs = self.ui.closed_elsewhere(self.host.prompts());
        self.ui_out(outs);
        // Suggestions accepted with `a2acp suggestions accept N` are no longer offered.
        let open: Vec<u64> = self
            .host
            .agent()
            .suggestions()
            .iter()
            .map(|s| s.id())
            .collect();
        let outs = self
            .ui
            .retain_suggestions(|id| open.contains(&id), self.host.prompts());
        self.ui_out(outs);
    }

    pub(super) fn say(&self, text: &str) {
        match &self.opts.terminal {
            Some(t) => t.println(text),
            None => {
                if self.opts.transcript {
                    println!("{}", self.line('|', text));
                } else {
                    info!("{text}");
                }
            }
        }
    }

    pub(super) fn line(&self, mark: char, text: &str) -> String {
        let t = match self.opts.started {
            Some(s) => {
                let d = s.elapsed();
                format!("{:>4}.{:03}s", d.as_secs(), d.subsec_millis())
            }
            None => self.now().to_string(),
        };
        format!("{t} {:<5} {mark} {text}", self.opts.name)
    }

    pub(super) fn show_prompt(&mut self, p: &Prompt) {
        if let Some(u) = &self.opts.auto {
            self.pending.insert(0, u.answer(p));
            return;
        }
        let group = self.host.prompt_group(p);
        if self.opts.terminal.is_some() {
            let outs = self.ui.show_in(p, group);
            self.ui_out(outs);
            return;
        }
        if self.opts.print_prompts {
            println!(
                "{}\n   (answer with `a2acp answer {} ...`: {})",
                prompt::render_in(p, group.as_ref()),
                p.id,
                prompt::help(p)
            );
        }
    }

    pub(super) fn ui_out(&mut self, outs: Vec<UiOut>) {
        for o in outs {
            match o {
                UiOut::Print(s) => {
                    if let Some(t) = &self.opts.terminal {
                        t.println(&s);
                    }
                }
                UiOut::Echo(s) => {
                    if let Some(t) = &self.opts.terminal {
                        t.echo(&s);
                    }
                }
                UiOut::Answer(c) => self.pending.insert(0, c),
            }
        }
    }
}
