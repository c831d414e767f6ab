/*
 * worker_barrier.c - a correct MPI_THREAD_MULTIPLE program in which the
 * world collectives of one rank are made by a worker thread: on rank 0 every
 * iteration's MPI_Barrier(MPI_COMM_WORLD) runs in a thread created for it
 * (and joined at once), on the other ranks in the main thread. A recorder
 * that runs its collective protocol only on the thread that called
 * MPI_Init_thread leaves the other ranks waiting for rank 0 forever.
 *
 * Each iteration also records --record-bytes of user data (through
 * evenflush_record, looked up with dlsym, skipped without the recorder), so
 * that the recorder has something to flush.
 *
 * Usage: worker_barrier [--iterations N] [--record-bytes B]
 *   (defaults N = 300, B = 65536)
 *
 * If MPI_THREAD_MULTIPLE is not provided the program fails (exit 1): it
 * exists to test exactly that level.
 *
 * MPI calls per rank: MPI_Init_thread 1, MPI_Comm_rank 1, MPI_Comm_size 1,
 *   MPI_Barrier N, MPI_Allreduce 1, MPI_Finalize 1.
 * stdout (rank 0): "worker_barrier ranks=P iterations=N sum=S" where S is
 *   the Allreduce of the ranks' iteration counts (P*N).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <mpi.h>
#include <pthread.h>
#include "common.h"

typedef void (*record_fn)(const char *, const void *, size_t);

static void *barrier_thread(void *arg)
{
    (void)arg;
    MPI_Barrier(MPI_COMM_WORLD);
    return NULL;
}

int main(int argc, char **argv)
{
    long iterations = flag_value(argc, argv, "--iterations", 300);
    long record_bytes = flag_value(argc, argv, "--record-bytes", 65536);
    int provided = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    int rank = 0, size = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (provided < MPI_THREAD_MULTIPLE) {
        if (rank == 0) fprintf(stderr, "worker_barrier: MPI_THREAD_MULTIPLE not provided (%d)\n", provided);
        MPI_Finalize();
        return 1;
    }
    record_fn record = (record_fn)dlsym(RTLD_DEFAULT, "evenflush_record");
    char *payload = calloc((size_t)record_bytes + 1, 1);
    if (payload == NULL) return 1;
    long done = 0;
    for (long i = 0; i < iterations; i++) {
        if (record != NULL && record_bytes > 0) {
            payload[0] = (char)i;
            record("iteration", payload, (size_t)record_bytes);
        }
        if (rank == 0) {
            pthread_t t;
            if (pthread_create(&t, NULL, barrier_thread, NULL) != 0) return 1;
            pthread_join(t, NULL);
        } else {
            MPI_Barrier(MPI_COMM_WORLD);
        }
        done++;
    }
    long sum = 0;
    MPI_Allreduce(&done, &sum, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0) printf("worker_barrier ranks=%d iterations=%ld sum=%ld\n", size, iterations, sum);
    free(payload);
    MPI_Finalize();
    return 0;
}
