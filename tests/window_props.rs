//! Property of windows (`reconstruct/src/window.rs`, `evenflush report WINDOW`): the counts of the
//! parts add up to the count of the whole. A random trace (written with the format crate's own
//! writer, as `reconstruct/tests/views_synthetic.rs` does) is cut at random instants into
//! consecutive time windows, and its ranks into single-rank windows; every call is counted in
//! exactly one part. Windows are closed (`[from, to]`), so a call starting exactly on a cut would
//! be in both neighbours: calls start on whole microseconds and cuts fall half-way between.

use std::path::{Path, PathBuf};

use format::{
    ChunkEncoder, Event, FileHeader, Marker, MpiCall, NO_RANK, NO_REQUEST, NO_TAG, RankFileWriter,
    RawBuf, rank_file_name,
};
use proptest::prelude::*;
use trace::Trace;
use trace::window::{Window, WindowSpec};
use views::report::{Report, profile_trace_window};

const US: u64 = 1_000;
/// Every rank's end of `MPI_Init`, ticks (= ns): the origin of the windows' seconds.
const INIT_DONE: u64 = US / 2;
const NAMES: [&str; 4] = ["MPI_Barrier", "MPI_Wait", "MPI_Test", "MPI_Comm_rank"];

/// Per rank, the microsecond at which each of its calls starts (ascending, distinct), and which
/// function it is.
type RankCalls = Vec<(u64, u16)>;

fn arb_trace() -> impl Strategy<Value = Vec<RankCalls>> {
    prop::collection::vec(
        prop::collection::btree_map(1u64..400, 1u16..=NAMES.len() as u16, 0..60)
            .prop_map(|m| m.into_iter().collect::<Vec<_>>()),
        1..=4,
    )
}

/// The last microsecond any call may start at; `MPI_Finalize` starts after it.
const LAST_US: u64 = 400;

struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn write(dir: &Path, ranks: &[RankCalls]) {
    let mut encoder = ChunkEncoder::new(1);
    for (rank, calls) in ranks.iter().enumerate() {
        let rank = rank as u32;
        let header = FileHeader::nanoseconds(rank, ranks.len() as u32, "window property test");
        let file = std::fs::File::create(dir.join(rank_file_name(rank, 0))).unwrap();
        let mut w = RankFileWriter::new(file, &header).unwrap();
        let mut events: Vec<Event> = NAMES
            .iter()
            .enumerate()
            .map(|(i, name)| Event::FunctionDef {
                id: i as u16 + 1,
                name: (*name).into(),
            })
            .collect();
        events.push(Event::Marker(Marker::InitDone { time: INIT_DONE }));
        for &(at, func) in calls {
            events.push(Event::Call(MpiCall {
                func,
                start: at * US,
                end: at * US + 300,
                comm: 0,
                peer: NO_RANK,
                tag: NO_TAG,
                bytes: 0,
                root: NO_RANK,
                request: NO_REQUEST,
                cost: 0,
                recv_bytes: 0,
                site: format::NO_SITE,
            }));
        }
        events.push(Event::Marker(Marker::FinalizeStart {
            time: (LAST_US + 1) * US,
        }));
        // Several chunks per rank, so a window also cuts across chunk boundaries.
        for (seq, piece) in events.chunks(7).enumerate() {
            let mut buf = RawBuf::new();
            for e in piece {
                buf.push_event(e);
            }
            w.write_chunk(&encoder.encode(rank, 0, seq as u64, &buf))
                .unwrap();
        }
    }
}

/// Calls counted by `evenflush report` in the window of `from`/`to` (seconds) and `ranks`.
fn count(trace: &Trace, from: Option<&str>, to: Option<&str>, ranks: Option<&str>) -> u64 {
    let spec = WindowSpec::parse(from, to, ranks).unwrap();
    let metas = trace::scan::scan(trace).unwrap();
    let window: Window = spec.resolve(&metas, trace.world_size).unwrap();
    let (profiles, _, skipped, _) =
        profile_trace_window(trace, &window, &metas, &mut |_, _| {}).unwrap();
    assert!(skipped.is_empty(), "{skipped:?}");
    Report::build("window property", &profiles)
        .functions
        .iter()
        .map(|f| f.count)
        .sum()
}

/// A cut half-way between microseconds `us` and `us + 1`, in seconds since the end of
/// `MPI_Init` (which is at `INIT_DONE`, half a microsecond).
fn cut_seconds(us: u64) -> String {
    format!("{}e-6", us)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn parts_add_up_to_the_whole(
        ranks in arb_trace(),
        cuts in prop::collection::btree_set(1u64..LAST_US, 0..6),
        split_at in 0usize..4,
    ) {
        let dir = std::env::temp_dir().join(format!(
            "evenflush-window-props-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let _cleanup = Scratch(dir.clone());
        write(&dir, &ranks);
        let trace = Trace::open(&dir).unwrap();
        let written: u64 = ranks.iter().map(|r| r.len() as u64).sum();

        // No window: every call.
        let whole = count(&trace, None, None, None);
        prop_assert_eq!(whole, written);
        // The run's span (from the end of MPI_Init to the start of MPI_Finalize) holds them all.
        let span = count(&trace, Some("0"), None, None);
        prop_assert_eq!(span, whole);

        // Consecutive time windows between the cuts.
        let edges: Vec<Option<String>> = std::iter::once(None)
            .chain(cuts.iter().map(|&c| Some(cut_seconds(c))))
            .chain(std::iter::once(None))
            .collect();
        let mut parts = Vec::new();
        for pair in edges.windows(2) {
            let from = pair[0].clone().unwrap_or_else(|| "0".into());
            parts.push(count(&trace, Some(&from), pair[1].as_deref(), None));
        }
        prop_assert_eq!(parts.iter().sum::<u64>(), span, "parts {:?} at cuts {:?}", parts, cuts);

        // One rank each: the ranks' counts add up to every rank's.
        let per_rank: Vec<u64> = (0..ranks.len())
            .map(|r| count(&trace, None, None, Some(&r.to_string())))
            .collect();
        prop_assert_eq!(per_rank.iter().sum::<u64>(), whole, "per rank {:?}", per_rank);

        // A window in time, over a rank subset and its complement.
        if ranks.len() > 1 {
            let split = 1 + split_at % (ranks.len() - 1);
            let list = |rs: std::ops::Range<usize>| {
                rs.map(|r| r.to_string()).collect::<Vec<_>>().join(",")
            };
            let (lo, hi) = (list(0..split), list(split..ranks.len()));
            let (from, to) = match (cuts.first(), cuts.last()) {
                (Some(&a), Some(&b)) if a < b => (cut_seconds(a), cut_seconds(b)),
                _ => ("0".into(), cut_seconds(LAST_US)),
            };
            let both = count(&trace, Some(&from), Some(&to), None);
            let a = count(&trace, Some(&from), Some(&to), Some(&lo));
            let b = count(&trace, Some(&from), Some(&to), Some(&hi));
            prop_assert_eq!(a + b, both, "ranks {} and {} in {}-{} s", lo, hi, from, to);
        }
    }
}
