/* A phase without MPI calls: Barrier, sleep for argv[1] ms, Barrier (any number of ranks).
 * tests/memory_recorder.rs (idle_phase_is_sampled_by_one_node_watcher) checks that memory samples
 * fall inside the sleep and that one rank of the node reads the node's figures. */
#define _POSIX_C_SOURCE 199309L
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    long ms = argc > 1 ? atol(argv[1]) : 2500;
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Barrier(MPI_COMM_WORLD);
    struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&t, &t) != 0) {
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) printf("idle_phase ok\n");
    MPI_Finalize();
    return 0;
}
