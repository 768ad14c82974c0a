//! The terminal of an interactive agent: raw mode so that every choice is one keystroke,
//! a thread reading keys into an executor-independent channel (`flume`, awaitable on any
//! executor), and printing that works in raw mode.

use std::io::Write;
use std::sync::{Arc, Mutex};

use crossterm::event::{Event, KeyCode, KeyEventKind, KeyModifiers};

use crate::prompt::Key;

/// A key for the prompt flow, or the user quitting (Ctrl-C, Ctrl-D).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UiKey {
    /// A key.
    Key(Key),
    /// Ctrl-C or Ctrl-D.
    Quit,
}

struct Inner {
    keys: Mutex<Option<flume::Receiver<UiKey>>>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        let _ = crossterm::terminal::disable_raw_mode();
    }
}

/// The terminal (cheap to clone).
#[derive(Clone)]
pub struct Term {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Term {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Term")
    }
}

impl Term {
    /// Puts the terminal in raw mode and starts reading keys. Fails if stdin is not a
    /// terminal.
    pub fn start() -> std::io::Result<Term> {
        use std::io::IsTerminal;
        if !std::io::stdin().is_terminal() {
            return Err(std::io::Error::other(
                "standard input is not a terminal (prompts need one; use `a2acp answer` instead)",
            ));
        }
        crossterm::terminal::enable_raw_mode()?;
        let (tx, rx) = flume::unbounded();
        std::thread::Builder::new()
            .name("a2acp-keys".into())
            .spawn(move || loop {
                let Ok(ev) = crossterm::event::read() else {
                    let _ = tx.send(UiKey::Quit);
                    return;
                };
                let Event::Key(k) = ev else { continue };
                if k.kind != KeyEventKind::Press {
                    continue;
                }
                let key = match k.code {
                    KeyCode::Char('c') | KeyCode::Char('d')
                        if k.modifiers.contains(KeyModifiers::CONTROL) =>
                    {
                        UiKey::Quit
                    }
                    KeyCode::Char(c) => UiKey::Key(Key::Char(c)),
                    KeyCode::Enter => UiKey::Key(Key::Enter),
                    KeyCode::Backspace => UiKey::Key(Key::Backspace),
                    KeyCode::Esc => UiKey::Key(Key::Esc),
                    _ => continue,
                };
                let quit = key == UiKey::Quit;
                if tx.send(key).is_err() || quit {
                    return;
                }
            })?;
        Ok(Term {
            inner: Arc::new(Inner {
                keys: Mutex::new(Some(rx)),
            }),
        })
    }

    /// The key channel (once).
    pub fn take_keys(&mut self) -> Option<flume::Receiver<UiKey>> {
        self.inner.keys.lock().ok().and_then(|mut k| k.take())
    }

    /// Prints lines (raw mode needs `\r\n`). Control, escape and invisible characters
    /// never reach the terminal: they are shown as `�` or left out
    /// ([`a2acp_core::display::lines`]), whoever wrote the text.
    pub fn println(&self, s: &str) {
        let s = a2acp_core::display::lines(s, usize::MAX);
        let mut out = std::io::stdout().lock();
        let _ = write!(out, "{}\r\n", s.replace('\n', "\r\n"));
        let _ = out.flush();
    }

    /// Echoes typed characters.
    pub fn echo(&self, s: &str) {
        let mut out = std::io::stdout().lock();
        let _ = write!(out, "{s}");
        let _ = out.flush();
    }
}
