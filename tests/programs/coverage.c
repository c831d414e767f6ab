/* Exercises the less common wrapped families once each (2 ranks), with completions whose number
 * is known: tests/smoke.rs checks "completions 18" per rank (see the tally at the end). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
    int rank, size, flag, index, outcount, indices[4];
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int other = 1 - rank;
    int a[16] = {0}, b[16], c[64];
    MPI_Request r[4];
    MPI_Status st[4];

    /* Sendrecv, Sendrecv_replace (2 blocking completions) */
    MPI_Sendrecv(a, 4, MPI_INT, other, 1, b, 16, MPI_INT, MPI_ANY_SOURCE, 1, MPI_COMM_WORLD, &st[0]);
    MPI_Sendrecv_replace(a, 2, MPI_INT, other, 2, other, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    /* Probe + Recv (1), Iprobe loop */
    if (rank == 0) MPI_Send(a, 3, MPI_INT, 1, 3, MPI_COMM_WORLD);
    else {
        MPI_Probe(MPI_ANY_SOURCE, 3, MPI_COMM_WORLD, &st[0]);
        do MPI_Iprobe(0, 3, MPI_COMM_WORLD, &flag, MPI_STATUS_IGNORE); while (!flag);
        MPI_Recv(b, 16, MPI_INT, 0, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    }
    if (rank == 1) MPI_Send(a, 1, MPI_INT, 0, 4, MPI_COMM_WORLD);
    else MPI_Recv(b, 16, MPI_INT, 1, 4, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    /* so far: rank 0: 2 + 1 = 3, rank 1: 2 + 1 = 3 */

    /* Waitany x2 (2), Waitsome (<=2 per call, loop until 2 done) */
    MPI_Irecv(b, 16, MPI_INT, other, 5, MPI_COMM_WORLD, &r[0]);
    MPI_Isend(a, 5, MPI_INT, other, 5, MPI_COMM_WORLD, &r[1]);
    MPI_Waitany(2, r, &index, MPI_STATUS_IGNORE);
    MPI_Waitany(2, r, &index, &st[0]);
    MPI_Irecv(b, 16, MPI_INT, other, 6, MPI_COMM_WORLD, &r[0]);
    MPI_Isend(a, 6, MPI_INT, other, 6, MPI_COMM_WORLD, &r[1]);
    for (int done = 0; done < 2; done += outcount) MPI_Waitsome(2, r, &outcount, indices, MPI_STATUSES_IGNORE);
    /* +4 = 7 */

    /* Test loop (1+1), Testall (2), Testany (2), Testsome (2) */
    MPI_Irecv(b, 16, MPI_INT, other, 7, MPI_COMM_WORLD, &r[0]);
    MPI_Isend(a, 7, MPI_INT, other, 7, MPI_COMM_WORLD, &r[1]);
    do MPI_Test(&r[1], &flag, MPI_STATUS_IGNORE); while (!flag);
    do MPI_Test(&r[0], &flag, &st[0]); while (!flag);
    MPI_Irecv(b, 16, MPI_INT, other, 8, MPI_COMM_WORLD, &r[0]);
    MPI_Isend(a, 8, MPI_INT, other, 8, MPI_COMM_WORLD, &r[1]);
    do MPI_Testall(2, r, &flag, MPI_STATUSES_IGNORE); while (!flag);
    MPI_Irecv(b, 16, MPI_INT, other, 9, MPI_COMM_WORLD, &r[0]);
    MPI_Isend(a, 9, MPI_INT, other, 9, MPI_COMM_WORLD, &r[1]);
    for (int done = 0; done < 2;) {
        MPI_Testany(2, r, &index, &flag, MPI_STATUS_IGNORE);
        if (flag && index != MPI_UNDEFINED) done++;
    }
    MPI_Irecv(b, 16, MPI_INT, other, 10, MPI_COMM_WORLD, &r[0]);
    MPI_Isend(a, 10, MPI_INT, other, 10, MPI_COMM_WORLD, &r[1]);
    for (int done = 0; done < 2;) {
        MPI_Testsome(2, r, &outcount, indices, st);
        if (outcount != MPI_UNDEFINED) done += outcount;
    }
    /* +8 = 15 */

    /* Nonblocking collectives (2) */
    MPI_Ibarrier(MPI_COMM_WORLD, &r[0]);
    MPI_Iallreduce(MPI_IN_PLACE, c, 4, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &r[1]);
    MPI_Waitall(2, r, MPI_STATUSES_IGNORE);
    /* +2 = 17 */

    /* Collectives with IN_PLACE and v-counts */
    int counts[2] = {3, 3}, displs[2] = {0, 8};
    if (rank == 0) MPI_Gather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, c, 4, MPI_INT, 0, MPI_COMM_WORLD);
    else MPI_Gather(a, 4, MPI_INT, NULL, 0, MPI_DATATYPE_NULL, 0, MPI_COMM_WORLD);
    MPI_Alltoallv(a, counts, displs, MPI_INT, c, counts, displs, MPI_INT, MPI_COMM_WORLD);
    MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, c, 4, MPI_INT, MPI_COMM_WORLD);
    MPI_Reduce_scatter_block(a, b, 2, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    MPI_Scan(a, b, 2, MPI_INT, MPI_SUM, MPI_COMM_WORLD);

    /* Cartesian topology + neighbour collective */
    int dims[1] = {size}, periods[1] = {1};
    MPI_Comm cart;
    MPI_Cart_create(MPI_COMM_WORLD, 1, dims, periods, 0, &cart);
    MPI_Neighbor_allgather(a, 1, MPI_INT, c, 1, MPI_INT, cart);
    MPI_Comm_free(&cart);

    /* RMA */
    MPI_Win win;
    MPI_Win_create(c, sizeof c, sizeof(int), MPI_INFO_NULL, MPI_COMM_WORLD, &win);
    MPI_Win_fence(0, win);
    MPI_Put(a, 2, MPI_INT, other, 0, 2, MPI_INT, win);
    MPI_Win_fence(0, win);
    MPI_Win_lock(MPI_LOCK_SHARED, other, 0, win);
    MPI_Get(b, 2, MPI_INT, other, 0, 2, MPI_INT, win);
    MPI_Win_unlock(other, win);
    MPI_Win_free(&win);

    /* MPI-IO */
    MPI_File fh;
    char path[256];
    snprintf(path, sizeof path, "%s/evf_cov.bin", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    /* Deleted on close: a caller that sets no TMPDIR (clean_runs) left it in /tmp. */
    MPI_File_open(MPI_COMM_WORLD, path, MPI_MODE_CREATE | MPI_MODE_RDWR | MPI_MODE_DELETE_ON_CLOSE,
                  MPI_INFO_NULL, &fh);
    MPI_File_write_at_all(fh, rank * 64, a, 16, MPI_INT, MPI_STATUS_IGNORE);
    MPI_File_iread_at(fh, rank * 64, b, 16, MPI_INT, &r[0]);
    MPI_Wait(&r[0], MPI_STATUS_IGNORE);
    MPI_File_close(&fh);
    /* +1 (File_iread_at Wait) = 18 */

    MPI_Finalize();
    if (rank == 0) printf("coverage done\n");
    return 0;
}
