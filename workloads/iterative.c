/*
 * iterative.c - a workload shaped like the paper's program 1: a long
 * iterative program with a large resident working set that records some
 * trace data every iteration and synchronises with MPI_Barrier, so every
 * iteration ends in a collective after which an equalised suspension can
 * be placed.
 *
 * Each iteration: compute (a FIXED amount of work over the resident memory,
 * sized at start-up to take --compute-us on an undisturbed rank), then --records calls of
 * evenflush_record carrying --record-bytes in total, then MPI_Barrier.
 * The work is fixed rather than timed on purpose: if the operating system
 * swaps the program's memory out, the iteration really gets slower, which
 * is the effect the swap-versus-offload experiment measures.
 *
 * Usage: iterative [--mem MiB] [--iterations N] [--compute-us US]
 *                  [--record-bytes B] [--records K] [--work-units U]
 *                  [--random-payload MiB]
 *   defaults: --mem 64 --iterations 520 --compute-us 1000
 *             --record-bytes 65536 --records 4
 *   --work-units U fixes the work per iteration (U lines of 64 bytes) instead
 *   of calibrating it from --compute-us; runs that are to be compared (e.g.
 *   swap against offload) should reuse the units_per_iteration printed by a
 *   first run, since calibration on a shared machine is noisy.
 *   --mem 0 keeps no resident memory: a unit is then 8 dependent
 *   floating-point operations on registers, whose speed depends on the core
 *   alone and not on caches or memory bandwidth shared with whatever else
 *   runs on the machine; the steadiest workload for measuring how exactly a
 *   reconstruction recovers the original time.
 *   --touch-pages 1 writes one byte of every page of --mem at the start of
 *   each iteration and does the work units on registers (as with --mem 0):
 *   the working set stays resident and hot, so swapping it out slows the
 *   program exactly as before, but the time no longer depends on memory
 *   bandwidth shared with other tenants of the machine (±10 % between runs
 *   here for memory-bound work, ~1 % for register work).
 *   --random-payload P (default 0 = a constant byte pattern) takes the record
 *   payloads from a pool of P MiB of pseudo-random bytes, consecutive slices
 *   wrapping around, so the trace does not compress (a compressor's window
 *   never sees a repeat when P exceeds it). The pool is allocated and filled
 *   only when the recorder is present, so untraced runs are unchanged; it is
 *   never smaller than two records.
 *
 * evenflush_record is looked up with dlsym(RTLD_DEFAULT, ...), so the
 * program runs unchanged without the recorder (records are then skipped).
 *
 * MPI calls per rank (N iterations): MPI_Init 1, MPI_Comm_rank 1,
 *   MPI_Comm_size 1, MPI_Allreduce 1 (agree on the work per iteration;
 *   still called with --work-units so the call counts never change),
 *   MPI_Barrier N + 2, MPI_Wtime 2N + 2, MPI_Finalize 1.
 * User records per rank: K*N (when the recorder is present), B*N bytes.
 *
 * stdout (rank 0): a "iterative ..." line with the settings, then
 * "total_s=<seconds>" measured with MPI_Wtime from after the start barrier
 * to just before MPI_Finalize, then "barrier_s=<seconds>": the part of it
 * rank 0 spent inside the loop's MPI_Barrier calls (where a recorder that
 * suspends after collectives suspends).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef void (*record_fn)(const char *name, const void *data, size_t len);

/* One work unit updates one 64-byte line of the resident memory. */
#define LINE_DOUBLES 8
#define CALIBRATION_NS 20000000L
#define CALIBRATION_ATTEMPTS 3

static long flag_value(int argc, char **argv, const char *flag, long fallback)
{
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], flag) == 0) {
            if (i + 1 >= argc) {
                fprintf(stderr, "%s needs a value\n", flag);
                exit(2);
            }
            char *end = NULL;
            long v = strtol(argv[i + 1], &end, 10);
            if (end == argv[i + 1] || *end != '\0' || v < 0) {
                fprintf(stderr, "bad value for %s: %s\n", flag, argv[i + 1]);
                exit(2);
            }
            return v;
        }
    }
    return fallback;
}

static long elapsed_ns(const struct timespec *from)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (now.tv_sec - from->tv_sec) * 1000000000L + (now.tv_nsec - from->tv_nsec);
}

struct memory {
    double *data;
    size_t lines;
    size_t cursor;
};

/* Walks the memory line by line, wrapping, so over many iterations every
 * page of the working set is touched again and again. */
/* One write per page: keeps every page of the working set resident and
 * recently used at a small, bandwidth-independent cost. */
static void touch_every_page(struct memory *m)
{
    unsigned char *bytes = (unsigned char *)m->data;
    size_t len = m->lines * LINE_DOUBLES * sizeof(double);
    for (size_t at = 0; at < len; at += 4096)
        bytes[at] += 1;
}

/* Kept in memory so the register-only work cannot be optimised away. */
static volatile double register_work_sink;

static void work(struct memory *m, long units)
{
    if (m->lines == 0) {
        double x = register_work_sink + 1.0;
        for (long u = 0; u < units; u++)
            for (int k = 0; k < LINE_DOUBLES; k++)
                x = x * 0.999999 + 1e-6;
        register_work_sink = x;
        return;
    }
    double *d = m->data;
    size_t cursor = m->cursor;
    for (long u = 0; u < units; u++) {
        double *line = d + cursor * LINE_DOUBLES;
        for (int k = 0; k < LINE_DOUBLES; k++)
            line[k] = line[k] * 0.999999 + 1e-6 * (double)k;
        if (++cursor == m->lines)
            cursor = 0;
    }
    m->cursor = cursor;
}

/* Best of a few short runs: the rate of an undisturbed rank, so a moment of
 * interference from other processes during start-up does not shrink the
 * work of the whole run. */
static long calibrate_units_per_ms(struct memory *m)
{
    double best = 0.0;
    for (int attempt = 0; attempt < CALIBRATION_ATTEMPTS; attempt++) {
        struct timespec start;
        long units = 0, chunk = 1024, ns;
        clock_gettime(CLOCK_MONOTONIC, &start);
        while ((ns = elapsed_ns(&start)) < CALIBRATION_NS) {
            work(m, chunk);
            units += chunk;
        }
        double rate = (double)units * 1e6 / (double)ns;
        if (rate > best)
            best = rate;
    }
    return best >= 1.0 ? (long)best : 1;
}

int main(int argc, char **argv)
{
    long mem_mib = flag_value(argc, argv, "--mem", 64);
    long iterations = flag_value(argc, argv, "--iterations", 520);
    long compute_us = flag_value(argc, argv, "--compute-us", 1000);
    long record_bytes = flag_value(argc, argv, "--record-bytes", 65536);
    long records = flag_value(argc, argv, "--records", 4);
    long fixed_units = flag_value(argc, argv, "--work-units", -1);
    long random_mib = flag_value(argc, argv, "--random-payload", 0);
    long touch_pages = flag_value(argc, argv, "--touch-pages", 0);
    if (record_bytes > 0 && records < 1) {
        fprintf(stderr, "--records must be >= 1 when --record-bytes > 0\n");
        return 2;
    }

    int rank, size;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);

    record_fn record = NULL;
    *(void **)&record = dlsym(RTLD_DEFAULT, "evenflush_record");

    struct memory m;
    m.lines = (size_t)mem_mib * 1024 * 1024 / (LINE_DOUBLES * sizeof(double));
    m.cursor = 0;
    m.data = malloc(m.lines > 0 ? m.lines * LINE_DOUBLES * sizeof(double) : 1);
    /* The per-record buffer is separate from the working set so recording
     * never disturbs what the program computes. */
    size_t chunk = records > 0 ? (size_t)((record_bytes + records - 1) / records) : 0;
    unsigned char *payload = malloc(chunk > 0 ? chunk : 1);
    if (m.data == NULL || payload == NULL) {
        fprintf(stderr, "iterative: cannot allocate %ld MiB\n", mem_mib);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    /* Touch every page so the working set is resident from the start. */
    for (size_t i = 0; i < m.lines * LINE_DOUBLES; i++)
        m.data[i] = (double)(i % 1000) * 1e-3 + rank;
    memset(payload, 0xA5, chunk > 0 ? chunk : 1);
    unsigned char *pool = NULL;
    size_t pool_len = 0, pool_at = 0;
    if (random_mib > 0 && record != NULL && chunk > 0) {
        pool_len = (size_t)random_mib * 1024 * 1024;
        if (pool_len < 2 * chunk)
            pool_len = 2 * chunk;
        pool = malloc(pool_len);
        if (pool == NULL) {
            fprintf(stderr, "iterative: cannot allocate the %zu-byte payload pool\n", pool_len);
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
        uint64_t x = 0x9E3779B97F4A7C15ULL ^ (uint64_t)(rank + 1);
        for (size_t i = 0; i + 8 <= pool_len; i += 8) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            memcpy(pool + i, &x, 8);
        }
    }

    /* Every rank does the same work per iteration (that of the slowest
     * rank at start-up), so the barrier waits reflect disturbances, not a
     * calibration mismatch. The ranks calibrate together, as they will run. */
    struct memory registers = {NULL, 0, 0};
    struct memory *worked = touch_pages ? &registers : &m;
    MPI_Barrier(MPI_COMM_WORLD);
    long per_ms = fixed_units >= 0 ? 0 : calibrate_units_per_ms(worked);
    long slowest = per_ms;
    MPI_Allreduce(&per_ms, &slowest, 1, MPI_LONG, MPI_MIN, MPI_COMM_WORLD);
    long units = fixed_units >= 0 ? fixed_units : (long)((double)slowest * (double)compute_us / 1000.0);

    MPI_Barrier(MPI_COMM_WORLD);
    double in_barriers = 0.0;
    double start = MPI_Wtime();
    for (long it = 0; it < iterations; it++) {
        if (touch_pages)
            touch_every_page(&m);
        work(worked, units);
        if (record != NULL && record_bytes > 0) {
            long left = record_bytes;
            for (long k = 0; k < records && left > 0; k++) {
                size_t len = (size_t)left < chunk ? (size_t)left : chunk;
                unsigned char *data = payload;
                if (pool != NULL) {
                    if (pool_at + len > pool_len)
                        pool_at = 0;
                    data = pool + pool_at;
                    pool_at += len;
                }
                memcpy(data, &it, sizeof it < len ? sizeof it : len);
                record("iteration-data", data, len);
                left -= (long)len;
            }
        }
        double entered = MPI_Wtime();
        MPI_Barrier(MPI_COMM_WORLD);
        in_barriers += MPI_Wtime() - entered;
    }
    double total = MPI_Wtime() - start;

    if (rank == 0) {
        printf("iterative ranks=%d iterations=%ld mem_mib=%ld compute_us=%ld record_bytes=%ld records=%ld "
               "units_per_iteration=%ld touch_pages=%ld recorder=%s\n",
               size, iterations, mem_mib, compute_us, record_bytes, records, units, touch_pages,
               record != NULL ? "found" : "absent");
        printf("total_s=%.6f\n", total);
        printf("barrier_s=%.6f\n", in_barriers);
    }
    free(m.data);
    free(payload);
    free(pool);
    MPI_Finalize();
    return 0;
}
