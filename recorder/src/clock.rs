//! The recorder's clock: raw TSC ticks where the TSC is invariant, else `CLOCK_MONOTONIC`
//! nanoseconds. The generated C layer reads the same clock (`evf_now`), chosen by the same flag.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use format::{ClockCalibration, ClockSource};

static USE_TSC: AtomicBool = AtomicBool::new(false);

/// Current tick of the selected clock.
#[inline(always)]
pub fn now() -> u64 {
    if USE_TSC.load(Ordering::Relaxed) {
        tsc()
    } else {
        monotonic_ns()
    }
}

#[inline(always)]
fn tsc() -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: rdtsc has no preconditions on x86_64; it only reads the time-stamp counter.
        unsafe { core::arch::x86_64::_rdtsc() }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        monotonic_ns()
    }
}

pub fn monotonic_ns() -> u64 {
    clock_ns(libc::CLOCK_MONOTONIC)
}

pub fn realtime_ns() -> u64 {
    clock_ns(libc::CLOCK_REALTIME)
}

fn clock_ns(id: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; clock_gettime only writes it.
    unsafe { libc::clock_gettime(id, &mut ts) };
    (ts.tv_sec as u64)
        .wrapping_mul(1_000_000_000)
        .wrapping_add(ts.tv_nsec as u64)
}

/// Whether `/proc/cpuinfo` text reports an invariant TSC (both `constant_tsc` and `nonstop_tsc`).
pub fn cpuinfo_has_invariant_tsc(cpuinfo: &str) -> bool {
    let flags = cpuinfo
        .lines()
        .find(|l| l.starts_with("flags"))
        .unwrap_or("");
    let mut constant = false;
    let mut nonstop = false;
    for f in flags.split_whitespace() {
        constant |= f == "constant_tsc";
        nonstop |= f == "nonstop_tsc";
    }
    constant && nonstop
}

/// Chooses the clock source for this process. `EVENFLUSH_CLOCK=monotonic` forces the fallback.
pub fn select_source() -> ClockSource {
    let forced_monotonic =
        std::env::var("EVENFLUSH_CLOCK").is_ok_and(|v| v.eq_ignore_ascii_case("monotonic"));
    let invariant = cfg!(target_arch = "x86_64")
        && std::fs::read_to_string("/proc/cpuinfo").is_ok_and(|s| cpuinfo_has_invariant_tsc(&s));
    let source = if invariant && !forced_monotonic {
        ClockSource::Tsc
    } else {
        ClockSource::Monotonic
    };
    USE_TSC.store(source == ClockSource::Tsc, Ordering::Relaxed);
    source
}

pub fn source() -> ClockSource {
    if USE_TSC.load(Ordering::Relaxed) {
        ClockSource::Tsc
    } else {
        ClockSource::Monotonic
    }
}

/// Start of a calibration: a tick and a `CLOCK_MONOTONIC` reading taken together.
#[derive(Clone, Copy, Debug)]
pub struct CalibrationStart {
    tick: u64,
    mono_ns: u64,
    started: Instant,
}

pub fn begin_calibration() -> CalibrationStart {
    let (tick, mono_ns) = paired_reading();
    CalibrationStart {
        tick,
        mono_ns,
        started: Instant::now(),
    }
}

/// A tick and a monotonic reading as close together as we can get them: of a few tries, the one
/// whose two tick reads bracket the monotonic read most tightly.
fn paired_reading() -> (u64, u64) {
    let mut best = (u64::MAX, 0u64, 0u64);
    for _ in 0..16 {
        let a = now();
        let m = monotonic_ns();
        let b = now();
        let width = b.wrapping_sub(a);
        if width < best.0 {
            best = (width, a + width / 2, m);
        }
    }
    (best.1, best.2)
}

/// Ends the calibration begun by `start`, waiting until at least `min_span` has passed (the MPI
/// initialisation usually covers it, so the wait is rarely needed).
pub fn finish_calibration(start: CalibrationStart, min_span: Duration) -> ClockCalibration {
    let source = source();
    while start.started.elapsed() < min_span {
        std::thread::sleep(
            min_span
                .saturating_sub(start.started.elapsed())
                .min(Duration::from_millis(5)),
        );
    }
    let (tick, mono_ns) = paired_reading();
    let realtime = realtime_ns();
    let ticks_per_sec = match source {
        ClockSource::Tsc => {
            let dt = tick.wrapping_sub(start.tick) as f64;
            let dns = mono_ns.saturating_sub(start.mono_ns) as f64;
            if dns > 0.0 && dt > 0.0 {
                dt / dns * 1e9
            } else {
                1e9
            }
        }
        _ => 1e9,
    };
    ClockCalibration {
        ticks_per_sec,
        tick_at_epoch: tick,
        realtime_ns: realtime,
        source,
        read_ticks: 0,
    }
}

/// What one clock read adds to the code around it, in ticks: a run of reads timed by the clock
/// itself, divided by the reads it spans (the fastest of several runs, so a preemption does not
/// count).
///
/// Not the difference of two back-to-back reads: on an AMD EPYC under KVM that is 1 tick while
/// each `rdtsc` takes about 25 ticks (9.8 ns) of the program's time, so every sampled cost, which
/// adds one read for the one that opened the call's record, came out ~9 ns short on the cheap
/// calls (`tests/recorder_cost.rs`, paper-notes/recorder.md). Where a read's latency shows in
/// the back-to-back difference, the two figures agree.
pub fn read_cost_ticks() -> u64 {
    const READS: u64 = 64;
    const RUNS: usize = 64;
    let mut best = u64::MAX;
    for _ in 0..RUNS {
        let first = now();
        for _ in 0..READS {
            std::hint::black_box(now());
        }
        let last = now();
        // Between the samples of `first` and `last` lie the READS reads and one more: the rest of
        // `first`'s and the start of `last`'s.
        best = best.min(last.wrapping_sub(first) / (READS + 1));
    }
    best.max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn invariant_tsc_needs_both_flags() {
        assert!(cpuinfo_has_invariant_tsc(
            "model\t: 1\nflags\t\t: fpu tsc constant_tsc nonstop_tsc sse\n"
        ));
        assert!(!cpuinfo_has_invariant_tsc(
            "flags\t\t: fpu tsc constant_tsc sse\n"
        ));
        assert!(!cpuinfo_has_invariant_tsc("flags\t\t: fpu nonstop_tsc\n"));
        assert!(!cpuinfo_has_invariant_tsc(""));
    }

    #[test]
    fn a_read_costs_what_a_run_of_reads_takes_per_read() {
        select_source();
        let cal = finish_calibration(begin_calibration(), Duration::from_millis(30));
        let read_ns = read_cost_ticks() as f64 * 1e9 / cal.ticks_per_sec;
        // Timed by another clock: the fastest of five runs of 10^5 reads.
        const READS: u32 = 100_000;
        let per_read_ns = (0..5)
            .map(|_| {
                let t = Instant::now();
                for _ in 0..READS {
                    std::hint::black_box(now());
                }
                t.elapsed().as_nanos() as f64 / f64::from(READS)
            })
            .fold(f64::INFINITY, f64::min);
        // The back-to-back difference was 0.39 ns against 9.8 per read on an AMD EPYC VM.
        assert!(
            read_ns >= 0.5 * per_read_ns && read_ns <= 2.0 * per_read_ns + 5.0,
            "read cost {read_ns:.2} ns, but a run of reads takes {per_read_ns:.2} ns per read"
        );
    }

    #[test]
    fn calibration_converts_ticks_to_wall_time() {
        select_source();
        let start = begin_calibration();
        let cal = finish_calibration(start, Duration::from_millis(30));
        assert!(
            cal.ticks_per_sec > 1e6 && cal.ticks_per_sec < 1e11,
            "{cal:?}"
        );
        // Convert an independently measured interval; allow generous slack on a shared machine.
        let t0 = now();
        let m0 = monotonic_ns();
        std::thread::sleep(Duration::from_millis(20));
        let t1 = now();
        let m1 = monotonic_ns();
        let by_ticks = (t1 - t0) as f64 / cal.ticks_per_sec * 1e9;
        let by_mono = (m1 - m0) as f64;
        assert!(
            (by_ticks - by_mono).abs() < 0.05 * by_mono,
            "ticks say {by_ticks} ns, monotonic {by_mono} ns"
        );
    }
}
