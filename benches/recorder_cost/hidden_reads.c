/* What two clock reads add to a loop, depending on the work around them.
 *
 * The recorder charges every call its sampled cost, two reads of its clock included, as if the
 * call ran alone (recorder/src/front/cost.rs). Where the program's own work between the calls is
 * one dependent chain (tests/validate.rs's loop that computes between polls: UNITS multiply-adds
 * on one register), the core runs the reads beside that chain, and they add far less than their
 * own time. This prints, for each UNITS given, ns per iteration of the work alone, of the work
 * with two rdtsc, and of the two reads alone (the fastest of 5 runs of 2 M iterations each).
 *
 *   gcc -O2 -o /tmp/hidden_reads benches/recorder_cost/hidden_reads.c && /tmp/hidden_reads 0 20 60
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <x86intrin.h>

#define ITERATIONS 2000000L
#define RUNS 5

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}

/* ns per iteration of UNITS dependent multiply-adds, plus two reads when READS is set. */
static double loop_ns(long units, int reads, unsigned long long *sink)
{
    double x = 1.0, started = now_s();
    unsigned long long s = 0;
    for (long k = 0; k < ITERATIONS; k++) {
        for (long u = 0; u < units; u++)
            x = x * 1.0000001 + 1e-9;
        __asm__ volatile("" ::"x"(x));
        if (reads) {
            s += __rdtsc();
            s += __rdtsc();
        }
    }
    *sink += s + (unsigned long long)x;
    return (now_s() - started) / ITERATIONS * 1e9;
}

int main(int argc, char **argv)
{
    unsigned long long sink = 0;
    printf("%6s %12s %16s %12s %12s\n", "units", "work ns", "work+2 reads ns", "added ns", "2 reads ns");
    for (int a = 1; a < argc; a++) {
        long units = atol(argv[a]);
        double work = 1e300, both = 1e300, reads = 1e300;
        for (int r = 0; r < RUNS; r++) {
            double w = loop_ns(units, 0, &sink), b = loop_ns(units, 1, &sink), o = loop_ns(0, 1, &sink);
            work = w < work ? w : work;
            both = b < both ? b : both;
            reads = o < reads ? o : reads;
        }
        printf("%6ld %12.1f %16.1f %12.1f %12.1f\n", units, work, both, both - work, reads);
    }
    return sink == 42; /* keeps the sums alive */
}
