//! Progress on the terminal, with indicatif: bars for the Debian fetches, the initramfs and root
//! file system builds and the scenario run, drawn on stderr below the lines printed. Every line
//! xtask prints while a bar may be drawn goes through [`out`] or [`err`], so that no bar is drawn
//! over it and no two lines mix. When stderr is not a terminal (CI's log) indicatif draws
//! nothing, and the lines alone are printed, each whole, as they come.

use std::sync::LazyLock;
use std::time::Duration;

use indicatif::{MultiProgress, ProgressBar, ProgressStyle};

/// Every bar drawn now, one below the other on stderr.
static BARS: LazyLock<MultiProgress> = LazyLock::new(MultiProgress::new);

/// Prints `line` on stdout, above the bars.
pub fn out(line: &str) {
    BARS.suspend(|| println!("{line}"));
}

/// Prints `line` on stderr, above the bars.
pub fn err(line: &str) {
    BARS.suspend(|| eprintln!("{line}"));
}

/// Prints `text` (whole lines, or nothing) on stdout, above the bars.
pub fn out_text(text: &str) {
    BARS.suspend(|| print!("{text}"));
}

/// Prints `text` (whole lines, or nothing) on stderr, above the bars.
pub fn err_text(text: &str) {
    BARS.suspend(|| eprint!("{text}"));
}

/// A bar or a spinner on the terminal, taken away when dropped.
pub struct Progress(ProgressBar);

impl Progress {
    /// A bar of `length` steps for `what` (`what [===>    ] 12/57 message 1m`).
    pub fn bar(length: u64, what: &str) -> Self {
        let style =
            ProgressStyle::with_template("{prefix} [{bar:16}] {pos}/{len} {wide_msg} {elapsed:>4}")
                .expect("a valid template")
                .progress_chars("=> ");
        Self::add(ProgressBar::new(length).with_style(style), what)
    }

    /// A spinner for `what`, a step of unknown length (`⠙ what message 12s`).
    pub fn spinner(what: &str) -> Self {
        let style = ProgressStyle::with_template("{spinner} {prefix} {wide_msg} {elapsed:>4}")
            .expect("a valid template");
        Self::add(ProgressBar::new_spinner().with_style(style), what)
    }

    fn add(bar: ProgressBar, what: &str) -> Self {
        let bar = BARS.add(bar.with_prefix(what.to_string()));
        // Redrawn as time passes, even while nothing moves (a long download, a long scenario).
        bar.enable_steady_tick(Duration::from_millis(200));
        Progress(bar)
    }

    /// One step done.
    pub fn inc(&self) {
        self.0.inc(1);
    }

    /// What is being done now, shown after the bar.
    pub fn set_message(&self, message: impl Into<String>) {
        self.0.set_message(message.into());
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.0.finish_and_clear();
        BARS.remove(&self.0);
    }
}
