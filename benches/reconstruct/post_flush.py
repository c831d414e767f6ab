#!/usr/bin/env python3
"""Indirect perturbation after flushes (the paper's HP'), measured directly.

For one rank, compares the program's own time between consecutive MPI_Barrier calls (end of one
barrier to the start of the next: compute plus user records) in a reference run and in a
reconstructed offload run of the same program. The iterations are split by whether a flush
suspension came right before them. If the reconstruction is exact and the flushes leave nothing
behind, both groups match the reference; a slower "after a flush" group is time the program lost
to the flush itself (cold caches, page faults), which removing DP' cannot give back.

Usage: post_flush.py EVENFLUSH REFERENCE_RECONSTRUCTED OFFLOAD_RECONSTRUCTED [rank]
(both directories written by `evenflush reconstruct`, so their times are nanoseconds).
"""
import re
import statistics
import subprocess
import sys

CALL = re.compile(r"^\[\d+\] \d+ (MPI_\w+)\s+start=(\d+) end=(\d+)")
SUSP = re.compile(r"Suspension\(Suspension \{ seq: (\d+), .*flushed: (true|false)")


def gaps(evenflush, trace, rank):
    """(gap_ns, after_flush) for every pair of consecutive barriers on `rank`."""
    out = subprocess.run([evenflush, "dump", trace, "--rank", str(rank)], check=True,
                         capture_output=True, text=True).stdout
    result, last_end, flushed_since = [], None, False
    for line in out.splitlines():
        m = CALL.match(line)
        if m and m.group(1) == "MPI_Barrier":
            start, end = int(m.group(2)), int(m.group(3))
            if last_end is not None:
                result.append((start - last_end, flushed_since))
            last_end, flushed_since = end, False
            continue
        s = SUSP.search(line)
        if s and s.group(2) == "true":
            flushed_since = True
    return result


def main():
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    evenflush, ref, run = sys.argv[1:4]
    rank = int(sys.argv[4]) if len(sys.argv) > 4 else 0
    a, b = gaps(evenflush, ref, rank), gaps(evenflush, run, rank)
    if len(a) != len(b):
        sys.exit(f"not the same program: {len(a)} barrier gaps in REF, {len(b)} in RUN")
    after = [(x[0], y[0]) for x, y in zip(a, b) if y[1]]
    other = [(x[0], y[0]) for x, y in zip(a, b) if not y[1]]

    def show(name, pairs):
        if not pairs:
            print(f"{name:<22} none")
            return
        ref_ms = [x / 1e6 for x, _ in pairs]
        run_ms = [y / 1e6 for _, y in pairs]
        delta = [(y - x) / 1e3 for x, y in pairs]
        print(f"{name:<22} {len(pairs):>5} iterations: REF median {statistics.median(ref_ms):.4f} ms, "
              f"RUN median {statistics.median(run_ms):.4f} ms, RUN-REF median {statistics.median(delta):+.1f} us, "
              f"sum {sum(delta) / 1e3:+.2f} ms")

    print(f"rank {rank}: time between consecutive barriers (compute + records)")
    show("after a flush", after)
    show("other iterations", other)
    total = sum(y - x for x, y in zip([p[0] for p in a], [p[0] for p in b]))
    print(f"all gaps: RUN-REF {total / 1e6:+.2f} ms in total")


if __name__ == "__main__":
    main()
