/*
 * threads.c - two pthreads per rank talk to the partner rank (r ^ 1) at the
 * same time: thread 0 on MPI_COMM_WORLD with tag 10, thread 1 on its own
 * MPI_Comm_dup of the world with tag 11. Each does N ping-pongs; the even
 * rank of a pair sends first. The recorder has to keep the two threads'
 * events apart and still match every message.
 *
 * Usage: threads [--iterations N]   (default N = 50; P must be even)
 *
 * If the library provides less than MPI_THREAD_MULTIPLE, rank 0 prints
 * "threads: skipped ..." and every rank finalizes and exits 0; in that case
 * the calls are only MPI_Init_thread, MPI_Comm_rank, MPI_Finalize (1 each).
 *
 * Exact MPI calls per rank (P ranks, N iterations, MULTIPLE provided):
 *   main thread: MPI_Init_thread 1, MPI_Comm_rank 1, MPI_Comm_size 1,
 *                MPI_Comm_dup 1, MPI_Allreduce 1, MPI_Comm_free 1, MPI_Finalize 1
 *   each of the two worker threads: MPI_Send N, MPI_Recv N
 *   so per rank MPI_Send 2N, MPI_Recv 2N.
 * Totals for P = 2, N = 50: Send 200, Recv 200, the main-thread calls 2 each.
 *
 * stdout (rank 0 only): the sum over ranks of both threads' checksums.
 */
#include <mpi.h>
#include <pthread.h>
#include "common.h"

#define MSG_LEN 32

struct worker {
    MPI_Comm comm;
    int tag;
    int rank;
    int partner;
    long iterations;
    uint64_t checksum;
};

static void *run_worker(void *arg)
{
    struct worker *w = arg;
    int32_t out[MSG_LEN], in[MSG_LEN];
    uint64_t hash = FOLD_SEED;
    for (long it = 0; it < w->iterations; it++) {
        for (int i = 0; i < MSG_LEN; i++)
            out[i] = (int32_t)(w->rank * 100000 + w->tag * 1000 + it * 10 + i);
        if (w->rank % 2 == 0) {
            MPI_Send(out, MSG_LEN, MPI_INT32_T, w->partner, w->tag, w->comm);
            MPI_Recv(in, MSG_LEN, MPI_INT32_T, w->partner, w->tag, w->comm, MPI_STATUS_IGNORE);
        } else {
            MPI_Recv(in, MSG_LEN, MPI_INT32_T, w->partner, w->tag, w->comm, MPI_STATUS_IGNORE);
            MPI_Send(out, MSG_LEN, MPI_INT32_T, w->partner, w->tag, w->comm);
        }
        for (int i = 0; i < MSG_LEN; i++)
            hash = fold64(hash, (uint64_t)(uint32_t)in[i]);
    }
    w->checksum = hash;
    return NULL;
}

int main(int argc, char **argv)
{
    long iterations = flag_value(argc, argv, "--iterations", 50);
    int provided = MPI_THREAD_SINGLE;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (provided < MPI_THREAD_MULTIPLE) {
        if (rank == 0)
            printf("threads: skipped, MPI_THREAD_MULTIPLE not provided (provided=%d)\n", provided);
        MPI_Finalize();
        return 0;
    }
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size % 2 != 0) {
        if (rank == 0)
            fprintf(stderr, "threads needs an even number of ranks\n");
        MPI_Abort(MPI_COMM_WORLD, 1);
    }

    MPI_Comm second;
    MPI_Comm_dup(MPI_COMM_WORLD, &second);
    struct worker workers[2] = {
        {MPI_COMM_WORLD, 10, rank, rank ^ 1, iterations, 0},
        {second, 11, rank, rank ^ 1, iterations, 0},
    };
    pthread_t tids[2];
    for (int t = 0; t < 2; t++) {
        if (pthread_create(&tids[t], NULL, run_worker, &workers[t]) != 0) {
            fprintf(stderr, "pthread_create failed\n");
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
    }
    for (int t = 0; t < 2; t++)
        pthread_join(tids[t], NULL);

    uint64_t local = workers[0].checksum ^ (workers[1].checksum * 3), global = 0;
    MPI_Allreduce(&local, &global, 1, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0)
        printf("threads ranks=%d iterations=%ld checksum=%016llx\n", size, iterations,
               (unsigned long long)global);
    MPI_Comm_free(&second);
    MPI_Finalize();
    return 0;
}
