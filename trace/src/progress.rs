//! A progress bar on stderr, shown only when stderr is a terminal (never in pipes, logs or JSON
//! consumers' captures).

use std::io::IsTerminal;

pub struct Bar(Option<indicatif::ProgressBar>);

impl Bar {
    pub fn for_terminal(what: &str) -> Bar {
        if !std::io::stderr().is_terminal() {
            return Bar(None);
        }
        let bar = indicatif::ProgressBar::new(0);
        let style = indicatif::ProgressStyle::with_template(
            "{msg} [{bar:40}] {human_pos}/{human_len} events ({per_sec}, {eta})",
        )
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
        .progress_chars("=> ");
        bar.set_style(style);
        bar.set_message(what.to_owned());
        Bar(Some(bar))
    }

    /// A bar that never draws (tests, JSON output).
    pub fn hidden() -> Bar {
        Bar(None)
    }

    pub fn update(&self, done: u64, total: u64) {
        if let Some(bar) = &self.0 {
            bar.set_length(total);
            bar.set_position(done);
        }
    }

    pub fn finish(&self) {
        if let Some(bar) = &self.0 {
            bar.finish_and_clear();
        }
    }
}
