/* The untraced side of `evenflush validate`: a preload that records nothing but the span the
 * reconstruction reports for traced runs, "end of MPI_Init to start of MPI_Finalize, max over
 * ranks", so both sides of the comparison measure the same interval. Each rank reads
 * CLOCK_MONOTONIC at the two points; at MPI_Finalize rank 0 gets the maximum (one reduction, after
 * the interval has ended) and writes it, in seconds, to $EVENFLUSH_SPAN_FILE. A second line gives
 * the most CPUs any rank was allowed to run on ("cpus N"): 1 when every rank was bound to a core
 * as a batch system binds it, which is what the reconstruction's fidelity was measured with. */
#define _GNU_SOURCE
#include <mpi.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double evf_probe_init_done;

static double evf_probe_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int MPI_Init(int *argc, char ***argv)
{
    int rc = PMPI_Init(argc, argv);
    evf_probe_init_done = evf_probe_now();
    return rc;
}

int MPI_Init_thread(int *argc, char ***argv, int required, int *provided)
{
    int rc = PMPI_Init_thread(argc, argv, required, provided);
    evf_probe_init_done = evf_probe_now();
    return rc;
}

int MPI_Finalize(void)
{
    double span = evf_probe_now() - evf_probe_init_done, longest = span;
    int rank = 0;
    PMPI_Comm_rank(MPI_COMM_WORLD, &rank);
    PMPI_Reduce(&span, &longest, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    cpu_set_t allowed;
    int cpus = sched_getaffinity(0, sizeof allowed, &allowed) == 0 ? CPU_COUNT(&allowed) : 0;
    int most = cpus;
    PMPI_Reduce(&cpus, &most, 1, MPI_INT, MPI_MAX, 0, MPI_COMM_WORLD);
    const char *path = getenv("EVENFLUSH_SPAN_FILE");
    if (rank == 0 && path) {
        FILE *out = fopen(path, "w");
        if (out) {
            fprintf(out, "%.9f\ncpus %d\n", longest, most);
            fclose(out);
        }
    }
    return PMPI_Finalize();
}
