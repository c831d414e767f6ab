//! A job killed as a whole (SIGTERM or SIGINT to every rank: `pkill`, `scancel`, Ctrl-C at the
//! launcher) must leave every rank's trace, not only the fastest writer's.
//!
//! Each rank writes its trace before dying of the signal, and the ranks do not finish at once:
//! one holds more events, or gets the CPU later. MPICH's launcher (Hydra) sends SIGKILL to every
//! other rank as soon as one rank dies of a signal, so the first rank to finish used to cut the
//! others' writes short (a file with no end, or an empty one). So a rank that writes because of
//! such a signal leaves a marker file in the trace directory while it writes; once done, it waits
//! until no marker of its run remains before it dies. The wait is bounded by
//! `--abort-flush-limit`, like every wait for a write at an abnormal end.
//!
//! A rank whose signal came a little later than the others' may not have left its marker yet
//! when a fast rank looks, so a rank never dies less than [`SETTLE`] after its own signal: a rank
//! killed alone ends that much later than it would untraced.
//!
//! The markers sit in the first output directory, which every rank of a job shares; where ranks
//! write to directories local to their node, each rank waits only for its own node's writers.
//! The run's id is in the marker's name, so a marker left by an earlier run that was killed
//! outright (SIGKILL) does not hold up this one. Without a run id (the recorder preloaded by
//! hand, not through `evenflush run`), such a marker delays the end by at most the bound.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::lifecycle::session::session;

/// The least time between a rank's signal and its death, for its peers to announce themselves.
pub const SETTLE: Duration = Duration::from_millis(200);
const POLL: Duration = Duration::from_millis(10);
const PREFIX: &str = ".ending-";

/// This rank's announcement that it is writing its trace because the job was killed.
pub struct Writing {
    dir: PathBuf,
    run: String,
    mine: Option<PathBuf>,
    since: Instant,
    limit: Duration,
}

/// The run's id as it may stand in a file name.
fn run_tag() -> String {
    std::env::var("EVENFLUSH_RUN_ID")
        .unwrap_or_default()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// Called by the signal helper before the final write: leaves this rank's marker. `since` is
/// when the signal came; `None` without a session (nothing is written then either).
pub fn announce(since: Instant) -> Option<Writing> {
    let s = session()?;
    let dir = s.first_out_dir();
    let run = run_tag();
    let path = dir.join(format!("{PREFIX}{run}.rank-{:05}", s.rank));
    // No marker (a read-only or full directory): this rank still waits for the others'.
    let mine = std::fs::File::create(&path).ok().map(|_| path);
    Some(Writing {
        dir,
        run,
        mine,
        since,
        limit: s.config.abort_flush_limit,
    })
}

impl Writing {
    /// After the final write: takes this rank's marker away, then waits (bounded) while another
    /// rank of the run still writes. Returns how many ranks were still writing when it gave up.
    pub fn wait_for_the_others(self) -> usize {
        if let Some(mine) = &self.mine {
            let _ = std::fs::remove_file(mine);
        }
        let prefix = format!("{PREFIX}{}.rank-", self.run);
        let deadline = self.since + self.limit.max(SETTLE);
        loop {
            let writing = self.writers(&prefix);
            let now = Instant::now();
            if (writing == 0 && now >= self.since + SETTLE) || now >= deadline {
                return writing;
            }
            std::thread::sleep(POLL);
        }
    }

    /// Markers of this run in the directory (this rank's is gone by now).
    fn writers(&self, prefix: &str) -> usize {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return 0;
        };
        entries
            .filter_map(Result::ok)
            .filter(|e| {
                e.file_name()
                    .to_str()
                    .is_some_and(|n| n.starts_with(prefix))
            })
            .count()
    }
}
