/* Recorder cost benchmark: N cheap MPI calls in one process, timed inside the program (so MPI_Init
 * and the trace write at MPI_Finalize are excluded). Usage: cheap_calls [calls] [rank|barrier]
 * Prints: "<calls> <ns per call>". */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

int main(int argc, char **argv)
{
    long calls = argc > 1 ? atol(argv[1]) : 10000000L;
    int barrier = argc > 2 && strcmp(argv[2], "barrier") == 0;
    MPI_Init(&argc, &argv);
    int rank = 0, sink = 0;
    /* Warm up caches, page in the first trace block. */
    for (long i = 0; i < 1000; i++) MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    double t0 = now_ns();
    if (barrier) {
        for (long i = 0; i < calls; i++) MPI_Barrier(MPI_COMM_SELF);
    } else {
        for (long i = 0; i < calls; i++) {
            MPI_Comm_rank(MPI_COMM_WORLD, &rank);
            sink += rank;
        }
    }
    double t1 = now_ns();
    printf("%ld %.2f\n", calls, (t1 - t0) / (double)calls);
    MPI_Finalize();
    return sink == 12345 ? 1 : 0;
}
