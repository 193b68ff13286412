//! What the commands print: `--output text|json` (one flag, the same values everywhere), and
//! writes that survive a closed pipe. `acp ... | head` closes stdout early; `println!` would
//! panic there, these helpers stop writing and let the command finish with its own exit code.
//! Colours follow anstream's rules: on for a terminal, off under `NO_COLOR` or `CLICOLOR=0`,
//! forced by `CLICOLOR_FORCE`.

use std::fmt::Display;
use std::io::{ErrorKind, Write};
use std::sync::atomic::{AtomicBool, Ordering};

use anstream::stream::RawStream;
use anstream::{AutoStream, ColorChoice};
use anstyle::Style;
use anyhow::Context as _;

/// `--output`: `text` for people, `json` for tools. Other values are refused by the parser.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Output {
    #[default]
    Text,
    Json,
}

/// The `--output` flag, flattened into every command that reports something.
#[derive(Debug, Clone, Copy, clap::Args)]
pub struct OutputArg {
    /// `text` for people, `json` (one JSON document) for tools
    #[arg(long, value_enum, default_value_t = Output::Text)]
    pub output: Output,
}

impl OutputArg {
    pub fn json(self) -> bool {
        self.output == Output::Json
    }
}

static STDOUT_CLOSED: AtomicBool = AtomicBool::new(false);
static STDERR_CLOSED: AtomicBool = AtomicBool::new(false);

/// Writes `text` to `w` unless the reader went away (then nothing more is written to it).
fn write_to(mut w: impl Write, closed: &AtomicBool, text: &str) -> std::io::Result<()> {
    if closed.load(Ordering::Relaxed) {
        return Ok(());
    }
    match w.write_all(text.as_bytes()).and_then(|()| w.flush()) {
        Err(e) if e.kind() == ErrorKind::BrokenPipe => {
            closed.store(true, Ordering::Relaxed);
            Ok(())
        }
        other => other,
    }
}

/// Prints `text` to stdout as it is.
pub fn print(text: &str) -> anyhow::Result<()> {
    write_to(std::io::stdout().lock(), &STDOUT_CLOSED, text).context("cannot write to stdout")
}

/// Prints one line to stdout.
pub fn line(text: impl Display) -> anyhow::Result<()> {
    print(&format!("{text}\n"))
}

/// Prints one line to stderr.
pub fn eline(text: impl Display) -> anyhow::Result<()> {
    write_to(
        std::io::stderr().lock(),
        &STDERR_CLOSED,
        &format!("{text}\n"),
    )
    .context("cannot write to stderr")
}

/// True when `stream` takes colours (see the module's docs).
pub fn colours_on(stream: &impl RawStream) -> bool {
    AutoStream::choice(stream) != ColorChoice::Never
}

/// `text` in `style` when `on`, else as it is.
pub fn paint(text: &str, style: Style, on: bool) -> String {
    if on {
        format!("{style}{text}{style:#}")
    } else {
        text.to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Closed;

    impl Write for Closed {
        fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
            Err(ErrorKind::BrokenPipe.into())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn painting_wraps_in_the_style_and_a_reset() {
        let green = anstyle::AnsiColor::Green.on_default();
        assert_eq!(paint("+ a", green, true), "\x1b[32m+ a\x1b[0m");
        assert_eq!(paint("+ a", green, false), "+ a");
        assert_eq!(paint("x", Style::new().bold(), true), "\x1b[1mx\x1b[0m");
    }

    #[test]
    fn a_closed_reader_ends_the_output_without_an_error() {
        let closed = AtomicBool::new(false);
        assert!(write_to(Closed, &closed, "a\n").is_ok());
        assert!(closed.load(Ordering::Relaxed));
        let mut kept = Vec::new();
        assert!(write_to(&mut kept, &closed, "b\n").is_ok());
        assert!(kept.is_empty(), "nothing is written after the pipe closed");
    }
}
