//! Download progress: a bar on a terminal, periodic plain lines in logs (a bar redrawn with `\r`
//! is unreadable in a CI log or `journalctl`), or events for an embedding program / a test.

use std::io::IsTerminal;
use std::sync::Arc;
use std::time::{Duration, Instant};

use indicatif::{BinaryBytes, HumanDuration, ProgressBar, ProgressDrawTarget, ProgressStyle};

/// How downloads report progress (always on stderr, so stdout stays clean for generated text).
#[derive(Clone, Default)]
pub enum Progress {
    /// A bar when stderr is a terminal, plain lines otherwise.
    #[default]
    Auto,
    Bar,
    Lines,
    Hidden,
    Observer(Arc<dyn Fn(&ProgressEvent) + Send + Sync>),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProgressEvent {
    /// `resumed` bytes were already on disk from an earlier, interrupted run.
    Start {
        label: String,
        total: Option<u64>,
        resumed: u64,
    },
    Advance {
        done: u64,
        total: Option<u64>,
    },
    Finish {
        label: String,
        done: u64,
    },
}

/// A one-off status line (e.g. a slow step after a download) where a human is watching.
pub(crate) fn note(progress: &Progress, message: &str) {
    if matches!(progress, Progress::Auto | Progress::Bar | Progress::Lines) {
        eprintln!("{message}");
    }
}

/// One transfer being reported: a whole catalog entry (all its wheels) or one Hub file.
pub(crate) struct Transfer {
    sink: Sink,
    label: String,
    total: Option<u64>,
    done: u64,
    resumed: u64,
    started: Instant,
    last_line: Instant,
    last_line_done: u64,
}

enum Sink {
    Bar(ProgressBar),
    Lines,
    Hidden,
    Observer(Arc<dyn Fn(&ProgressEvent) + Send + Sync>),
}

/// Plain-line mode prints at most this often, and at least every 10% of the total.
const LINE_INTERVAL: Duration = Duration::from_secs(5);

impl Transfer {
    pub(crate) fn start(progress: &Progress, label: &str, total: Option<u64>, resumed: u64) -> Transfer {
        let sink = match progress {
            Progress::Auto if std::io::stderr().is_terminal() => Sink::Bar(new_bar(label, total)),
            Progress::Auto | Progress::Lines => Sink::Lines,
            Progress::Bar => Sink::Bar(new_bar(label, total)),
            Progress::Hidden => Sink::Hidden,
            Progress::Observer(f) => Sink::Observer(f.clone()),
        };
        let now = Instant::now();
        let t = Transfer {
            sink,
            label: label.to_string(),
            total,
            done: resumed,
            resumed,
            started: now,
            last_line: now,
            last_line_done: resumed,
        };
        match &t.sink {
            Sink::Bar(bar) => bar.set_position(resumed),
            Sink::Lines => {
                let size = total.map(|n| format!(" ({})", BinaryBytes(n))).unwrap_or_default();
                let resume =
                    if resumed > 0 { format!(", resuming at {}", BinaryBytes(resumed)) } else { String::new() };
                eprintln!("downloading {label}{size}{resume}");
            }
            Sink::Hidden => {}
            Sink::Observer(f) => f(&ProgressEvent::Start { label: t.label.clone(), total, resumed }),
        }
        t
    }

    pub(crate) fn advance(&mut self, bytes: u64) {
        self.done += bytes;
        match &self.sink {
            Sink::Bar(bar) => bar.set_position(self.done),
            Sink::Lines => {
                let tenth = self.total.map_or(u64::MAX, |t| (t / 10).max(1));
                if self.last_line.elapsed() >= LINE_INTERVAL || self.done - self.last_line_done >= tenth {
                    eprintln!("{}", self.status_line());
                    self.last_line = Instant::now();
                    self.last_line_done = self.done;
                }
            }
            Sink::Hidden => {}
            Sink::Observer(f) => f(&ProgressEvent::Advance { done: self.done, total: self.total }),
        }
    }

    /// Bytes counted so far will be fetched again (a server ignored a Range request).
    pub(crate) fn rewind(&mut self, bytes: u64) {
        self.done = self.done.saturating_sub(bytes);
        self.last_line_done = self.last_line_done.min(self.done);
        if let Sink::Bar(bar) = &self.sink {
            bar.set_position(self.done);
        }
    }

    pub(crate) fn finish(self) {
        let summary = || {
            format!(
                "downloaded {} ({}) in {}, {}/s",
                self.label,
                BinaryBytes(self.done),
                HumanDuration(self.started.elapsed()),
                BinaryBytes(self.rate() as u64)
            )
        };
        match &self.sink {
            // The bar gives way to the same one-line summary plain mode prints, so what stays on
            // screen reads the same either way and later output starts on a fresh line.
            Sink::Bar(bar) => {
                bar.finish_and_clear();
                eprintln!("{}", summary());
            }
            Sink::Lines => eprintln!("{}", summary()),
            Sink::Hidden => {}
            Sink::Observer(f) => f(&ProgressEvent::Finish { label: self.label.clone(), done: self.done }),
        }
    }

    /// Bytes per second fetched in this run (resumed bytes were not fetched now).
    fn rate(&self) -> f64 {
        (self.done - self.resumed.min(self.done)) as f64 / self.started.elapsed().as_secs_f64().max(1e-3)
    }

    fn status_line(&self) -> String {
        let rate = self.rate();
        match self.total {
            Some(total) => {
                let pct = if total == 0 { 100.0 } else { self.done as f64 * 100.0 / total as f64 };
                let eta = if rate > 0.0 {
                    format!(
                        ", ETA {}",
                        HumanDuration(Duration::from_secs_f64(total.saturating_sub(self.done) as f64 / rate))
                    )
                } else {
                    String::new()
                };
                format!(
                    "{}: {} / {} ({pct:.0}%), {}/s{eta}",
                    self.label,
                    BinaryBytes(self.done),
                    BinaryBytes(total),
                    BinaryBytes(rate as u64)
                )
            }
            None => format!("{}: {}, {}/s", self.label, BinaryBytes(self.done), BinaryBytes(rate as u64)),
        }
    }
}

impl Drop for Transfer {
    // A failed transfer leaves the bar where it stopped instead of erasing it, so the user sees how
    // far it got next to the error message.
    fn drop(&mut self) {
        if let Sink::Bar(bar) = &self.sink
            && !bar.is_finished()
        {
            bar.abandon();
        }
    }
}

fn new_bar(label: &str, total: Option<u64>) -> ProgressBar {
    let bar = ProgressBar::with_draw_target(total, ProgressDrawTarget::stderr());
    let template = if total.is_some() {
        "{msg} [{wide_bar}] {binary_bytes}/{binary_total_bytes} {binary_bytes_per_sec} ETA {eta}"
    } else {
        "{msg} {spinner} {binary_bytes} {binary_bytes_per_sec}"
    };
    // The templates are constants, so this only fails if indicatif changes its syntax; fall back
    // to its default style rather than fail a download over cosmetics.
    if let Ok(style) = ProgressStyle::with_template(template) {
        bar.set_style(style.progress_chars("=> "));
    }
    bar.set_message(label.to_string());
    bar
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_line_has_bytes_percent_speed_and_eta() {
        let mut t = Transfer::start(&Progress::Hidden, "m.gguf", Some(100 << 20), 10 << 20);
        t.started -= Duration::from_secs(2);
        t.advance(40 << 20);
        let line = t.status_line();
        assert!(line.starts_with("m.gguf: 50.00 MiB / 100.00 MiB (50%), 20.00 MiB/s, ETA "), "{line}");
        let mut t = Transfer::start(&Progress::Hidden, "x", None, 0);
        t.advance(1024);
        assert!(t.status_line().starts_with("x: 1.00 KiB, "), "{}", t.status_line());
    }
}
