//! The synthetic trace the reconstruct benches read: the format crate's halo exchange on every
//! rank, with an equalised suspension (DP') after every 200th Allreduce and clock samples at init,
//! each suspension and finalize; optionally with the recorder's per-call cost (DP) spent in the
//! recorded times too. The generator's own times are then the untraced run (the truth a
//! reconstruction should recover), and each recorded event is handed out beside the event it
//! was generated from.

use std::path::Path;

use format::synthetic::{HaloConfig, generate};
use format::{
    ChunkEncoder, ClockCalibration, ClockSample, ClockSource, Event, FileHeader, Marker,
    RankFileWriter, RawBuf, SampleKind, Suspension, rank_file_name,
};

pub const EVENTS_PER_ITERATION: u64 = 18;

/// Every rank's stream, with suspensions and clock samples, handed to `sink`.
#[allow(dead_code)]
pub fn rank_events(world: u32, rank: u32, events: u64, mut sink: impl FnMut(&Event)) {
    rank_events_with(world, rank, events, false, |e, _| sink(e));
}

/// As [`rank_events`]; with `dp`, the recorded times also hold every call's cost, spent right
/// after its end (where the recorder spends it). `sink` gets each recorded event with the
/// generator's (untraced) one, `None` for what only the recorder writes (samples, suspensions).
pub fn rank_events_with(
    world: u32,
    rank: u32,
    events: u64,
    dp: bool,
    mut sink: impl FnMut(&Event, Option<&Event>),
) {
    let cfg = HaloConfig {
        world_size: world,
        rank,
        iterations: events / EVENTS_PER_ITERATION,
        ..HaloConfig::default()
    };
    let offset_ns = f64::from(rank) * 1_234.5;
    let mut extra = 0u64;
    let mut allreduces = 0u64;
    let mut seq = 0u64;
    generate(&cfg, |truth| {
        let mut truth = truth.clone();
        // The generator tags a message by the face it leaves through; a receive must name the face
        // it arrives at (left ↔ right, down ↔ up) for sends and receives to pair up.
        match &mut truth {
            Event::Call(c) if c.func == format::synthetic::FUNC_IRECV => c.tag ^= 1,
            Event::Completion(c) if c.source >= 0 => c.tag ^= 1,
            _ => {}
        }
        let mut e = truth.clone();
        trace::times::for_each_time(&mut e, |t| *t += extra);
        let after_allreduce =
            matches!(&e, Event::Call(c) if c.func == format::synthetic::FUNC_ALLREDUCE);
        if let Event::Marker(m @ (Marker::InitDone { .. } | Marker::FinalizeStart { .. })) = &e {
            let (local, when) = match *m {
                Marker::InitDone { time } => (time, SampleKind::Init),
                Marker::FinalizeStart { time } => (time, SampleKind::Finalize),
                _ => unreachable!("matched above"),
            };
            sink(
                &Event::Clock(ClockSample {
                    local,
                    offset_ns,
                    rtt_ns: 800.0,
                    when,
                }),
                None,
            );
        }
        sink(&e, Some(&truth));
        if dp && let Event::Call(c) = &e {
            extra += u64::from(c.cost);
        }
        if after_allreduce {
            allreduces += 1;
            if allreduces.is_multiple_of(200)
                && let Event::Call(c) = &e
            {
                let z = 400_000 + u64::from(rank) * 10;
                let start = c.end + 2 * c.cost as u64;
                sink(
                    &Event::Suspension(Box::new(Suspension {
                        seq,
                        start,
                        z_ns: z / 2,
                        end: start + z,
                        ..Default::default()
                    })),
                    None,
                );
                sink(
                    &Event::Clock(ClockSample {
                        local: start + z / 2,
                        offset_ns,
                        rtt_ns: 800.0,
                        when: SampleKind::Suspension,
                    }),
                    None,
                );
                seq += 1;
                extra += z;
            }
        }
    });
}

/// Writes the trace of [`rank_events`] into `dir`: the number of events written.
#[allow(dead_code)]
pub fn write_trace(dir: &Path, world: u32, events: u64) -> u64 {
    write_trace_with(dir, world, events, false)
}

/// Writes the trace of [`rank_events_with`] into `dir`: the number of events written.
pub fn write_trace_with(dir: &Path, world: u32, events: u64, dp: bool) -> u64 {
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).expect("bench dir");
    let mut encoder = ChunkEncoder::new(1);
    let mut total = 0u64;
    for rank in 0..world {
        let header = FileHeader {
            rank,
            world_size: world,
            part: 0,
            clock: ClockCalibration {
                ticks_per_sec: 2e9,
                tick_at_epoch: 0,
                realtime_ns: 0,
                source: ClockSource::Tsc,
                read_ticks: 0,
            },
            created_unix_ns: 0,
            producer: "reconstruct bench".into(),
        };
        let file = std::fs::File::create(dir.join(rank_file_name(rank, 0))).expect("rank file");
        let mut w = RankFileWriter::new(std::io::BufWriter::new(file), &header).expect("header");
        let mut buf = RawBuf::new();
        let mut seq = 0;
        rank_events_with(world, rank, events, dp, |e, _| {
            buf.push_event(e);
            total += 1;
            if buf.events() >= 1 << 16 {
                w.write_chunk(&encoder.encode(rank, 0, seq, &buf))
                    .expect("write");
                seq += 1;
                buf.clear();
            }
        });
        if !buf.is_empty() {
            w.write_chunk(&encoder.encode(rank, 0, seq, &buf))
                .expect("write");
        }
        w.flush().expect("flush");
    }
    total
}
