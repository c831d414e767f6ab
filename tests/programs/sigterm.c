/*
 * sigterm.c - a job that is meant to be killed. After a short warm-up of
 * collectives and point-to-point it prints "ready" (rank 0, flushed), then
 * sleeps 10 ms and calls MPI_Barrier, over and over, until SIGTERM ends it.
 * The program installs no signal handler of its own: what happens on SIGTERM
 * is entirely up to the MPI launcher and the recorder.
 *
 * Usage: sigterm [--iterations N]   (default N = 60000, i.e. about 600 s;
 *                                    a bound so a forgotten job ends by itself)
 *                [--warm-calls K]   rank 0 alone makes K more MPI_Comm_rank
 *                                   calls before "ready" (default 0), so that
 *                                   its trace takes longer to write than the
 *                                   others' when the job is killed
 *
 * Exact MPI calls per rank (P ranks, N loop iterations, run to completion):
 *   MPI_Init 1, MPI_Comm_rank 1, MPI_Comm_size 1, MPI_Bcast 1,
 *   MPI_Allreduce 1, MPI_Send 1, MPI_Recv 1 (one lap of a ring, P >= 2),
 *   MPI_Barrier 1 + N, MPI_Finalize 1, and rank 0 K more MPI_Comm_rank
 * When killed after "ready": every warm-up call above has completed on every
 * rank (the barrier before "ready" guarantees it), plus some number of loop
 * barriers that differs by at most one between ranks; no MPI_Finalize.
 *
 * stdout (rank 0 only): "ready", then, if not killed, "done iterations=N".
 */
/* nanosleep is POSIX, not ISO C */
#define _POSIX_C_SOURCE 200809L
#include <mpi.h>
#include <time.h>
#include "common.h"

#define PAUSE_NS 10000000L

int main(int argc, char **argv)
{
    long iterations = flag_value(argc, argv, "--iterations", 60000);
    long warm_calls = flag_value(argc, argv, "--warm-calls", 0);
    int rank, size;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size < 2) {
        if (rank == 0)
            fprintf(stderr, "sigterm needs at least 2 ranks\n");
        MPI_Finalize();
        return 1;
    }

    int64_t seed = rank == 0 ? 12345 : 0;
    MPI_Bcast(&seed, 1, MPI_INT64_T, 0, MPI_COMM_WORLD);
    int64_t sum = 0;
    MPI_Allreduce(&seed, &sum, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
    int64_t token = sum;
    int right = (rank + 1) % size, left = (rank - 1 + size) % size;
    if (rank == 0) {
        MPI_Send(&token, 1, MPI_INT64_T, right, 5, MPI_COMM_WORLD);
        MPI_Recv(&token, 1, MPI_INT64_T, left, 5, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    } else {
        MPI_Recv(&token, 1, MPI_INT64_T, left, 5, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        token += rank;
        MPI_Send(&token, 1, MPI_INT64_T, right, 5, MPI_COMM_WORLD);
    }
    if (rank == 0) {
        int again;
        for (long i = 0; i < warm_calls; i++)
            MPI_Comm_rank(MPI_COMM_WORLD, &again);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) {
        printf("ready\n");
        fflush(stdout);
    }

    for (long it = 0; it < iterations; it++) {
        struct timespec pause = {0, PAUSE_NS};
        while (nanosleep(&pause, &pause) != 0) {
            /* interrupted by a signal that did not kill us: sleep the rest */
        }
        MPI_Barrier(MPI_COMM_WORLD);
    }
    if (rank == 0)
        printf("done iterations=%ld token=%lld\n", iterations, (long long)token);
    MPI_Finalize();
    return 0;
}
