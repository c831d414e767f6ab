/*
 * in_status.c - an MPI_Waitall that returns MPI_ERR_IN_STATUS (2 ranks).
 *
 * Errors return (MPI_ERRORS_RETURN). Rank 0 sends 4 ints with tag 1, then 1 int with tag 2; rank 1
 * posts a receive of 1 int for each and waits for both with MPI_Waitall: the first is truncated
 * (MPI_ERR_TRUNCATE in its status), the second completes normally, and the Waitall returns
 * MPI_ERR_IN_STATUS. The second's status says MPI_SUCCESS (Open MPI: it completed) or
 * MPI_ERR_PENDING (MPICH stops at the first error: that request is still active), in which case
 * it is waited for again with MPI_Wait. Then a barrier.
 * stdout (rank 1): "in_status waitall=ERR_IN_STATUS first=ERR_TRUNCATE second=SUCCESS|PENDING got=7".
 */
#include <mpi.h>
#include "common.h"

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    if (rank == 0) {
        int four[4] = {1, 2, 3, 4}, one = 7;
        MPI_Send(four, 4, MPI_INT, 1, 1, MPI_COMM_WORLD);
        MPI_Send(&one, 1, MPI_INT, 1, 2, MPI_COMM_WORLD);
    } else if (rank == 1) {
        int small = 0, got = 0;
        MPI_Request reqs[2];
        MPI_Status st[2];
        MPI_Irecv(&small, 1, MPI_INT, 0, 1, MPI_COMM_WORLD, &reqs[0]);
        MPI_Irecv(&got, 1, MPI_INT, 0, 2, MPI_COMM_WORLD, &reqs[1]);
        int rc = MPI_Waitall(2, reqs, st);
        int first = 0;
        MPI_Error_class(st[0].MPI_ERROR, &first);
        int pending = st[1].MPI_ERROR == MPI_ERR_PENDING;
        if (pending)
            MPI_Wait(&reqs[1], &st[1]);
        printf("in_status waitall=%s first=%s second=%s got=%d\n",
               rc == MPI_ERR_IN_STATUS ? "ERR_IN_STATUS" : "other",
               first == MPI_ERR_TRUNCATE ? "ERR_TRUNCATE" : "other",
               pending ? "PENDING" : (st[1].MPI_ERROR == MPI_SUCCESS ? "SUCCESS" : "other"), got);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Finalize();
    return 0;
}
