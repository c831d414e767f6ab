/*
 * pcontrol.c - recording paused and resumed by the program, around a polling loop.
 *
 * Usage: pcontrol [--iterations N]   (default N = 10; any P >= 2)
 *
 * Per rank: N barriers; MPI_Pcontrol(0); N barriers; MPI_Pcontrol(1); N barriers; then one
 * ring exchange in which the receive is an MPI_Irecv completed by polling with MPI_Test (at
 * least one unsuccessful poll: the message is sent only after a barrier that follows the first
 * poll), and the send an MPI_Isend completed by MPI_Wait.
 * Calls a recorder that honours MPI_Pcontrol stores, per rank: MPI_Barrier 2N + 1, MPI_Pcontrol
 * 2, MPI_Irecv 1, MPI_Isend 1, MPI_Wait 1, MPI_Test >= 2 (the last one completes the receive).
 * stdout (rank 0 only): "pcontrol ranks=P iterations=N polls>=2 got=G".
 */
#include <mpi.h>
#include "common.h"

int main(int argc, char **argv)
{
    long iterations = flag_value(argc, argv, "--iterations", 10);
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    for (long i = 0; i < iterations; i++)
        MPI_Barrier(MPI_COMM_WORLD);
    MPI_Pcontrol(0);
    for (long i = 0; i < iterations; i++)
        MPI_Barrier(MPI_COMM_WORLD);
    MPI_Pcontrol(1);
    for (long i = 0; i < iterations; i++)
        MPI_Barrier(MPI_COMM_WORLD);

    int right = (rank + 1) % size, left = (rank + size - 1) % size;
    int got = -1, mine = rank;
    MPI_Request recv, send;
    MPI_Irecv(&got, 1, MPI_INT, left, 5, MPI_COMM_WORLD, &recv);
    int done = 0;
    long polls = 1;
    MPI_Test(&recv, &done, MPI_STATUS_IGNORE);
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Isend(&mine, 1, MPI_INT, right, 5, MPI_COMM_WORLD, &send);
    while (!done) {
        MPI_Test(&recv, &done, MPI_STATUS_IGNORE);
        polls++;
    }
    MPI_Wait(&send, MPI_STATUS_IGNORE);
    if (rank == 0)
        printf("pcontrol ranks=%d iterations=%ld polls>=2 %s got=%d\n", size, iterations,
               polls >= 2 ? "yes" : "no", got);
    MPI_Finalize();
    return 0;
}
