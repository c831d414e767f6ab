//! A known original run (the ring program, whose original timing is known) and the rebuild the
//! reconstruct tests run on it; shared by the mapping, happened-before and job tests.
#![allow(dead_code)]

use crate::common::*;
use format::synthetic::Rng;
use format::{ClockSample, Event, Marker, MpiCall, SampleKind, Suspension};
use reconstruct::rebuild::{self, Options, Remove, Summary};
use trace::Trace;

/// A known original run and the trace its recording would have produced.
pub struct Program {
    pub world: u32,
    pub measured: Vec<RankTrace>,
    /// Per rank, the original calls in global ns.
    pub original: Vec<Vec<MpiCall>>,
    /// Per rank, the recorder cost (ns) spent before each call.
    pub cost_before: Vec<Vec<u64>>,
    /// Per rank: original span, total suspension time, total cost inside the span (ns).
    pub span: Vec<u64>,
    pub suspended: Vec<u64>,
    pub cost: Vec<u64>,
}

/// Ranks exchange with their ring neighbours and meet in a barrier every iteration; every third
/// barrier is followed by a suspension of Z plus a rank-dependent overshoot. Rank r's clock runs
/// at (1 + r % 2) GHz and is behind rank 0's by r·1.000003 ms.
pub fn ring_program(world: u32, iterations: u64, seed: u64) -> Program {
    let mut rng = Rng::new(seed);
    let mut p = Program {
        world,
        measured: Vec::new(),
        original: vec![Vec::new(); world as usize],
        cost_before: vec![Vec::new(); world as usize],
        span: vec![0; world as usize],
        suspended: vec![0; world as usize],
        cost: vec![0; world as usize],
    };
    // The common schedule: every rank's timing derives from the iteration start T_i, so the
    // original run respects happened-before.
    let mut starts = Vec::new();
    let mut t = 10_000_000_000u64;
    for _ in 0..iterations {
        starts.push(t);
        t += 6_000 + rng.next_u64() % 3_000;
    }
    let init = 10_000_000_000u64 - 500;
    let finalize = t + 200;
    for r in 0..world {
        let k = 1 + u64::from(r % 2);
        let offset = u64::from(r) * 1_000_003;
        let ticks = |g: u64| (g - offset) * k;
        let (next, prev) = (((r + 1) % world) as i32, ((r + world - 1) % world) as i32);
        let mut events = function_defs();
        let mut extra = 0u64;
        let sample = |g: u64, when| {
            Event::Clock(ClockSample {
                local: ticks(g),
                offset_ns: offset as f64,
                rtt_ns: 100.0,
                when,
            })
        };
        events.push(sample(init, SampleKind::Init));
        events.push(Event::Marker(Marker::InitDone { time: ticks(init) }));
        let rank = r as usize;
        let mut suspended = 0u64;
        let mut push_call = |events: &mut Vec<Event>,
                             c: MpiCall,
                             extra: &mut u64,
                             suspended: u64,
                             rng: &mut Rng| {
            let cost_ns = 20 + rng.next_u64() % 60;
            p.original[rank].push(c);
            p.cost_before[rank].push(*extra - suspended);
            let mut m = c;
            m.start = ticks(c.start + *extra);
            m.end = ticks(c.end + *extra);
            m.cost = (cost_ns * k) as u32;
            events.push(Event::Call(m));
            *extra += cost_ns;
        };
        for (i, &ti) in starts.iter().enumerate() {
            let tag = i as i32;
            let a = ti + rng.next_u64() % 1_000;
            push_call(
                &mut events,
                call(SEND, a, a + 300, next, tag),
                &mut extra,
                suspended,
                &mut rng,
            );
            let b = ti + 1_500 + rng.next_u64() % 300;
            push_call(
                &mut events,
                call(RECV, b, ti + 2_000 + rng.next_u64() % 100, prev, tag),
                &mut extra,
                suspended,
                &mut rng,
            );
            events.push(received(prev, tag));
            let c = ti + 3_000 + rng.next_u64() % 1_000;
            push_call(
                &mut events,
                barrier(c, ti + 5_000 + rng.next_u64() % 100),
                &mut extra,
                suspended,
                &mut rng,
            );
            if i % 3 == 2 {
                let z = 50_000 + i as u64 * 10;
                let dur = z + (u64::from(r) * 37 + i as u64) % 200;
                // The suspension starts after the barrier and the recorder's cost for it.
                let start = ti + 5_100 + extra;
                events.push(Event::Suspension(Box::new(Suspension {
                    seq: (i / 3) as u64,
                    start: ticks(start),
                    z_ns: z,
                    end: ticks(start + dur),
                    flushed: i % 2 == 0,
                    overshoot_ns: dur - z,
                    offset_ns: offset as f64,
                    ..Default::default()
                })));
                events.push(sample(start + dur / 2, SampleKind::Suspension));
                extra += dur;
                suspended += dur;
            }
        }
        events.push(Event::Marker(Marker::FinalizeStart {
            time: ticks(finalize + extra),
        }));
        events.push(sample(finalize + extra + 50, SampleKind::Finalize));
        p.span[rank] = finalize - init;
        p.suspended[rank] = suspended;
        p.cost[rank] = extra - suspended;
        p.measured.push(RankTrace {
            rank: r,
            ticks_per_sec: 1e9 * k as f64,
            streams: vec![(0, events)],
        });
    }
    p
}

pub fn rebuild(dir: &std::path::Path, out: &std::path::Path, remove: Remove, hb: bool) -> Summary {
    let trace = Trace::open(dir).unwrap();
    let opts = Options {
        remove,
        hb,
        chunk_events: 97,
        // The pass's own count of the output's violations is checked against the output.
        verify: true,
        ..Options::default()
    };
    rebuild::reconstruct(&trace, out, &opts, &mut |_, _| {}).unwrap()
}
