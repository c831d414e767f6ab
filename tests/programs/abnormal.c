/* Ends in unusual ways to check the recorder still writes its trace.
 * Usage: abnormal <abort|exit|term|limit|threads> [calls] */
#include <mpi.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static long calls = 1000;

static void *worker(void *arg)
{
    int rank;
    (void)arg;
    for (long i = 0; i < calls; i++) MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    return NULL;
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "exit";
    if (argc > 2) calls = atol(argv[2]);
    int provided, rank;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (strcmp(mode, "threads") == 0) {
        pthread_t t[4];
        for (int i = 0; i < 4; i++) pthread_create(&t[i], NULL, worker, NULL);
        worker(NULL);
        for (int i = 0; i < 4; i++) pthread_join(t[i], NULL);
        MPI_Barrier(MPI_COMM_WORLD);
        MPI_Finalize();
        return 0;
    }
    for (long i = 0; i < calls; i++) MPI_Barrier(MPI_COMM_SELF);
    if (strcmp(mode, "abort") == 0) MPI_Abort(MPI_COMM_WORLD, 3);
    if (strcmp(mode, "exit") == 0) exit(0);
    if (strcmp(mode, "term") == 0) {
        raise(SIGTERM);
        /* Untraced, raise does not return: the test fails if the recorder lets the thread on. */
        fprintf(stderr, "abnormal: ran on after raise(SIGTERM)\n");
    }
    MPI_Finalize();
    return 0;
}
