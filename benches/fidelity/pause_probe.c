/* Equal pauses without a tracer: does pausing every rank for the same time, and taking that time
 * back out, leave the program's time as it was? An LD_PRELOAD for an untraced MPI program.
 *
 *   PAUSE_AT=240,480,720,960  the MPI_Barrier calls (counted from 1) after which every rank pauses
 *   PAUSE_MS=16               how long, as the recorder's equalised suspension does: sleep until
 *                             300 us before the end, then spin; then a barrier aligns the ranks
 *
 * At MPI_Finalize each rank prints "PAUSE rank R span S paused P": S from the end of MPI_Init to
 * the start of MPI_Finalize (validate's definition), P the time its pauses took, barrier included.
 * With PAUSE_AT unset it only measures, so both arms of a comparison carry the same wrapper. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double t_init, paused;
static long barriers;
static long pause_at[64];
static int pauses;
static double pause_s;

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static void pause_equal(void) {
    double start = now(), deadline = start + pause_s;
    for (;;) {
        double left = deadline - now();
        if (left <= 0) break;
        if (left > 300e-6) {
            double s = left - 300e-6;
            struct timespec ts = {(time_t)s, (long)((s - (time_t)s) * 1e9)};
            nanosleep(&ts, NULL);
        }
    }
    PMPI_Barrier(MPI_COMM_WORLD);
    paused += now() - start;
}

int MPI_Init(int *argc, char ***argv) {
    int rc = PMPI_Init(argc, argv);
    const char *at = getenv("PAUSE_AT"), *ms = getenv("PAUSE_MS");
    pause_s = (ms ? atof(ms) : 16.0) * 1e-3;
    if (at) {
        char *copy = strdup(at), *save = NULL;
        for (char *tok = strtok_r(copy, ",", &save); tok && pauses < 64;
             tok = strtok_r(NULL, ",", &save))
            pause_at[pauses++] = atol(tok);
        free(copy);
    }
    t_init = now();
    return rc;
}

int MPI_Barrier(MPI_Comm comm) {
    int rc = PMPI_Barrier(comm);
    barriers++;
    for (int i = 0; i < pauses; i++)
        if (pause_at[i] == barriers) pause_equal();
    return rc;
}

int MPI_Finalize(void) {
    double span = now() - t_init;
    int rank = 0;
    PMPI_Comm_rank(MPI_COMM_WORLD, &rank);
    fprintf(stderr, "PAUSE rank %d span %.6f paused %.6f barriers %ld\n", rank, span, paused,
            barriers);
    return PMPI_Finalize();
}
