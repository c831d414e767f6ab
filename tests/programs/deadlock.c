/*
 * deadlock.c - a genuine deadlock: ranks pair up as (0,1), (2,3), ... and
 * both ranks of a pair first call a blocking MPI_Recv from each other, so
 * neither ever reaches its MPI_Send. It never exits by itself; the test (a
 * watchdog) must kill it. Rank 0 prints "deadlocking" (flushed) right before
 * the receive, after a barrier, so a test knows every rank is about to block.
 *
 * Usage: deadlock        (P = 2 in the tests; any even P works)
 *
 * Exact MPI calls entered per rank (P ranks): MPI_Init 1, MPI_Comm_rank 1,
 *   MPI_Comm_size 1, MPI_Barrier 1, MPI_Recv 1 (entered, never returns).
 *   MPI_Send and MPI_Finalize are never reached.
 */
#include <mpi.h>
#include "common.h"

int main(int argc, char **argv)
{
    int rank, size;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size % 2 != 0) {
        if (rank == 0)
            fprintf(stderr, "deadlock needs an even number of ranks\n");
        MPI_Finalize();
        return 1;
    }
    int partner = rank ^ 1;
    int64_t in = 0, out = rank;
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) {
        printf("deadlocking\n");
        fflush(stdout);
    }
    MPI_Recv(&in, 1, MPI_INT64_T, partner, 9, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    MPI_Send(&out, 1, MPI_INT64_T, partner, 9, MPI_COMM_WORLD);
    printf("unreachable: received %lld\n", (long long)in);
    MPI_Finalize();
    return 0;
}
