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
//! The markers sit in a directory of their own, `.ending-RUN/` in the first output directory
//! (which every rank of a job shares; where ranks write to directories local to their node, each
//! rank waits only for its own node's writers). Listing it costs what the writers number, not
//! what the trace holds: at 10^4 ranks on a parallel file system, listing the trace directory
//! itself every few ms from every rank would be a metadata storm. The polls also space out.
//! The run's id is in the directory's name, so a marker left by an earlier run that was killed
//! outright (SIGKILL) does not hold up this one. Without a run id (the recorder preloaded by
//! hand, not through `evenflush run`), such a marker delays the end by at most the bound.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::lifecycle::session::{run_id, session};

/// The least time between a rank's signal and its death, for its peers to announce themselves.
pub const SETTLE: Duration = Duration::from_millis(200);
/// The first and the longest wait between two looks at the markers.
const FIRST_POLL: Duration = Duration::from_millis(5);
const LONGEST_POLL: Duration = Duration::from_millis(100);

/// This rank's announcement that it is writing its trace because the job was killed.
pub struct Writing {
    rank: u32,
    markers: PathBuf,
    mine: Option<PathBuf>,
    since: Instant,
    limit: Duration,
}

/// The directory of the run's markers, in `out`: `.ending-RUN`, the run's id with what may not
/// stand in a file name made `_`.
pub fn markers_dir(out: &std::path::Path) -> PathBuf {
    let run: String = run_id()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    out.join(format!(".ending-{run}"))
}

/// Called by the signal helper before the final write: leaves this rank's marker. `since` is
/// when the signal came; `None` without a session (nothing is written then either).
pub fn announce(since: Instant) -> Option<Writing> {
    let s = session()?;
    let markers = markers_dir(&s.first_out_dir());
    let path = markers.join(format!("rank-{:05}", s.rank));
    // The last rank out removes the directory: one that comes that late makes it again.
    let leave = || std::fs::create_dir_all(&markers).and_then(|()| std::fs::File::create(&path));
    // No marker (a read-only or full directory): this rank still waits for the others'.
    let mine = (0..3).find_map(|_| leave().ok()).map(|_| path.clone());
    Some(Writing {
        rank: s.rank,
        markers,
        mine,
        since,
        limit: s.config.abort_flush_limit,
    })
}

impl Writing {
    /// After the final write: takes this rank's marker away, then waits (bounded) while another
    /// rank of the run still writes. Returns how many ranks were still writing when it gave up,
    /// and says so.
    pub fn wait_for_the_others(self) -> usize {
        if let Some(mine) = &self.mine {
            let _ = std::fs::remove_file(mine);
        }
        let deadline = self.since + self.limit.max(SETTLE);
        let mut poll = FIRST_POLL;
        loop {
            let writing = self.writers();
            let now = Instant::now();
            if (writing == 0 && now >= self.since + SETTLE) || now >= deadline {
                if writing == 0 {
                    // The last one out takes the directory (it fails while a marker is in it).
                    let _ = std::fs::remove_dir(&self.markers);
                } else {
                    say!(
                        "evenflush: rank {}: {writing} rank(s) still writing their trace after \
                         --abort-flush-limit; this rank's end may cut theirs short",
                        self.rank
                    );
                }
                return writing;
            }
            std::thread::sleep(poll);
            poll = (poll * 2).min(LONGEST_POLL);
        }
    }

    /// Markers in the run's directory (this rank's is gone by now).
    fn writers(&self) -> usize {
        std::fs::read_dir(&self.markers).map_or(0, |entries| entries.count())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn writing(dir: &std::path::Path, limit: Duration) -> Writing {
        let markers = dir.join(".ending-test");
        std::fs::create_dir_all(&markers).unwrap();
        let mine = markers.join("rank-00000");
        std::fs::File::create(&mine).unwrap();
        Writing {
            rank: 0,
            markers,
            mine: Some(mine),
            since: Instant::now(),
            limit,
        }
    }

    fn temp(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("evf-killed-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn a_rank_waits_for_a_slower_writer_then_takes_the_directory() {
        let dir = temp("slower");
        let w = writing(&dir, Duration::from_secs(10));
        let other = w.markers.join("rank-00001");
        std::fs::File::create(&other).unwrap();
        let started = Instant::now();
        let remover = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(400));
            std::fs::remove_file(other).unwrap();
        });
        let markers = w.markers.clone();
        assert_eq!(w.wait_for_the_others(), 0);
        let waited = started.elapsed();
        remover.join().unwrap();
        assert!(waited >= Duration::from_millis(400), "{waited:?}");
        assert!(waited < Duration::from_secs(5), "{waited:?}");
        assert!(!markers.exists(), "the last one out removes the directory");
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn alone_a_rank_waits_the_settle_time_and_a_stale_marker_only_the_limit() {
        let dir = temp("alone");
        let started = Instant::now();
        assert_eq!(
            writing(&dir, Duration::from_secs(10)).wait_for_the_others(),
            0
        );
        let waited = started.elapsed();
        assert!(
            waited >= SETTLE && waited < Duration::from_secs(5),
            "{waited:?}"
        );

        let w = writing(&dir, Duration::from_millis(600));
        std::fs::File::create(w.markers.join("rank-00007")).unwrap();
        let started = Instant::now();
        assert_eq!(w.wait_for_the_others(), 1, "rank 7 never finished");
        let waited = started.elapsed();
        assert!(
            waited >= Duration::from_millis(600) && waited < Duration::from_secs(5),
            "{waited:?}"
        );
        std::fs::remove_dir_all(dir).unwrap();
    }
}
