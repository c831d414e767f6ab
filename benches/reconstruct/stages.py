"""Attributes `perf script --inline` call stacks of `evenflush reconstruct` to its stages.

Each sample goes to the stage of the innermost frame (inlined frames included) that names one,
so time in zstd, libm or memcpy lands where it was called from. The first pass over the trace
(metadata: `trace::scan`) is its own stage whatever it calls.
Usage: stages.py MODEL EVENTS START END STACKS
"""

import re
import sys

FIRST_PASS = re.compile(r"trace::scan::")
STAGES = [
    ("decode", r"ZSTD_decompress|ZSTD_decode|HUF_decompress|format::chunk::decode|format::reader|"
               r"format::walk|crc32c|format::body::|format::varint"),
    ("encode", r"ZSTD_compress|ZSTD_encode|HUF_compress|format::chunk::encode|EventBuf|"
               r"ZSTD_.*Block_|FSE_.*CTable|HIST_"),
    ("map", r"reconstruct::mapping|trace::clock|trace::times"),
    ("match/replay", r"reconstruct::hb::"),
    ("write", r"reconstruct::output|std::fs::|<std::fs::File|sys_write|ksys_write|vfs_write"),
    ("hand-over", r"reconstruct::pipeline::"),
]
COMPILED = [(name, re.compile(pat)) for name, pat in STAGES]


def stage_of(frames):
    if any(FIRST_PASS.search(f) for f in frames):
        return "first pass"
    for frame in frames:
        for name, pat in COMPILED:
            if pat.search(frame):
                return name
    return "other"


def samples(path):
    frames = []
    for line in open(path, errors="replace"):
        line = line.strip()
        if not line:
            if frames:
                yield frames
            frames = []
            continue
        parts = line.split(None, 1)
        frames.append(parts[1] if len(parts) > 1 else parts[0])
    if frames:
        yield frames


def main():
    model, events, start, end, path = sys.argv[1:6]
    events, secs = int(events), float(end) - float(start)
    counts, others = {}, {}
    total = 0
    for frames in samples(path):
        stage = stage_of(frames)
        counts[stage] = counts.get(stage, 0) + 1
        if stage == "other":
            others[frames[0]] = others.get(frames[0], 0) + 1
        total += 1
    if total == 0:
        sys.exit("no samples (is perf allowed here? see /proc/sys/kernel/perf_event_paranoid)")
    print(f"{model}: {events} events in {secs:.2f} s, {events / secs / 1e6:.2f} M events/s on 1 "
          f"thread; shares from {total} samples of a second run under perf")
    order = ["first pass"] + [n for n, _ in STAGES] + ["other"]
    for name in order:
        share = counts.get(name, 0) / total
        print(f"  {name:<13} {100 * share:5.1f} %  {share * secs / events * 1e9:6.1f} ns/event")
    for leaf, n in sorted(others.items(), key=lambda kv: -kv[1])[:4]:
        print(f"    other, leaf: {100 * n / total:4.1f} %  {leaf[:80]}")


main()
