//! When the recorder looks at memory, and what it does with what it sees: `Memory` records at
//! init, in flushing suspensions, every few seconds and at finalize; `--threshold auto`'s S
//! re-evaluated from each sample; and a warning, once, when the node has less memory available
//! than the next flush needs.

use std::sync::Once;
use std::sync::atomic::Ordering;

use format::{Event, Marker, MemorySample, MemoryWhen};

use crate::back::memory;
use crate::back::node::NodePlace;
use crate::back::{sink, threshold};
use crate::clock;
use crate::front::{self, record_event};
use crate::lifecycle::session::session;

static LOW_WARNING: Once = Once::new();

/// End of `MPI_Init`: opens the files, chooses S, and records both with the first sample.
pub fn at_init() {
    let Some(session) = session() else {
        return;
    };
    let place = NodePlace::from_env(session.size);
    memory::init(
        place,
        session.config.threshold_auto,
        session.clock.ticks_per_sec,
        when_idle,
    );
    let now = clock::now();
    let sample = take(MemoryWhen::Init);
    let choice = threshold::choose(now, &session.config, &memory::node(), place);
    record_event(&Event::Threshold(choice));
    if let Some(sample) = sample {
        warn_if_low(&sample, place);
    }
}

/// Inside a flushing suspension, after the write: the pause covers the sample's cost.
pub fn at_suspension() {
    observe(MemoryWhen::Suspension);
}

/// At a decision point: with `--threshold auto`, S follows the free memory as the watcher thread
/// last read it (every 50 ms: the program allocates most of its memory early, while the buffers
/// fill); then a sample if one is due.
pub fn at_decision() {
    if let Some(session) = session()
        && session.config.threshold_auto
        && let Some(place) = memory::place()
    {
        let held = front::held_bytes() + sink::held_compressed();
        if let Some(choice) =
            threshold::reevaluate(clock::now(), &session.config, &memory::node(), place, held)
        {
            record_event(&Event::Threshold(choice));
        }
    }
    maybe_periodic();
}

/// At a decision point or a buffer growth: a sample if the last is a few seconds old, and one
/// saying so if this rank's thread became its node's watcher.
pub fn maybe_periodic() {
    if memory::periodic_due(clock::now()) {
        observe(MemoryWhen::Periodic);
    }
    note_election();
}

fn note_election() {
    if memory::NODE_ELECTED.load(Ordering::Relaxed)
        && memory::NODE_ELECTED.swap(false, Ordering::Relaxed)
    {
        take(MemoryWhen::NodeWatcher);
    }
}

/// On the watcher thread, after each of its rounds: the rank's sample if the program took none
/// for a few seconds (a phase without MPI calls, or without decision points and buffer growth).
/// It goes to the watcher thread's own stream; S is left to the program's decision points.
pub fn when_idle() {
    if memory::periodic_due(clock::now()) {
        take(MemoryWhen::Idle);
    }
}

/// Right after an in-memory compression.
pub fn at_compression() {
    observe(MemoryWhen::Compressed);
}

/// Start of `MPI_Finalize`.
pub fn at_finalize() {
    note_election();
    take(MemoryWhen::Finalize);
}

/// Takes and records a sample; re-evaluates S and checks for low memory.
fn observe(when: MemoryWhen) {
    let Some(sample) = take(when) else { return };
    let (Some(session), Some(place)) = (session(), memory::place()) else {
        return;
    };
    let node = crate::back::node::NodeMemory {
        node_available: sample.node_available,
        cgroup_limit: sample.cgroup_limit,
        cgroup_usage: sample.cgroup_usage,
        swap_out_pages: sample.swap_out_pages,
    };
    if let Some(choice) = threshold::reevaluate(
        sample.time,
        &session.config,
        &node,
        place,
        sample.recorder_bytes,
    ) {
        record_event(&Event::Threshold(choice));
    }
    warn_if_low(&sample, place);
}

fn take(when: MemoryWhen) -> Option<MemorySample> {
    let sample = memory::sample(
        clock::now(),
        when,
        front::held_bytes() + sink::held_compressed(),
        sink::held_compressed(),
    )?;
    record_event(&Event::Memory(sample));
    Some(sample)
}

/// What the node's ranks still need before their next flush frees their buffers: each grows to
/// S, and the flush itself encodes a few pieces at a time.
fn needed_before_next_flush(place: NodePlace, recorder_bytes: u64) -> u64 {
    let per_rank =
        threshold::current().saturating_sub(recorder_bytes) + 2 * sink::PIECE_BYTES as u64;
    per_rank * u64::from(place.local_size)
}

fn warn_if_low(sample: &MemorySample, place: NodePlace) {
    let Some(available) = sample.available() else {
        return;
    };
    let needed = needed_before_next_flush(place, sample.recorder_bytes);
    if available >= needed {
        return;
    }
    LOW_WARNING.call_once(|| {
        let rank = session().map_or(0, |s| s.rank);
        let mib = |b: u64| b as f64 / (1u64 << 20) as f64;
        let fits = available / u64::from(place.local_size.max(1)) / 2;
        let auto = session().is_some_and(|s| s.config.threshold_auto);
        let advice = if auto {
            "even with --threshold auto: the program itself leaves too little memory (give the \
             job more memory or fewer ranks per node)"
                .to_string()
        } else {
            format!(
                "a threshold of about {:.0} MiB would fit (--threshold / EVENFLUSH_THRESHOLD, or \
                 --threshold auto to size it from free memory)",
                mib(fits.max(threshold::AUTO_MIN))
            )
        };
        say!(
            "evenflush: rank {rank}: WARNING: {:.0} MiB of memory left on this node{}, but its {} \
             rank(s) may each buffer up to {:.0} MiB before the next flush: the job may swap; \
             {advice}.",
            mib(available),
            if sample.cgroup_limit != format::UNKNOWN_BYTES {
                " (in its memory cgroup)"
            } else {
                ""
            },
            place.local_size,
            mib(threshold::current()),
        );
        record_event(&Event::Marker(Marker::MemoryLow {
            time: sample.time,
            available,
            needed,
        }));
    });
}
