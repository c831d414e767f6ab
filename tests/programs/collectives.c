/*
 * collectives.c - every blocking collective of MPI-3 on MPI_COMM_WORLD once
 * per round, plus three nonblocking ones completed with MPI_Wait. Roots move
 * with the round (root = round % P) and the "v" variants use counts that
 * differ per rank, so a recorder that mixes up roots or sizes is visible.
 * Every rank folds all it receives into a checksum; the checksums are
 * gathered to rank 0 at the end and printed in rank order.
 *
 * Usage: collectives [--rounds R]   (default R = 2)
 *
 * Exact MPI calls per rank (P ranks, R rounds):
 *   MPI_Init 1, MPI_Comm_rank 1, MPI_Comm_size 1, MPI_Finalize 1,
 *   MPI_Barrier R, MPI_Bcast R, MPI_Reduce R, MPI_Allreduce R,
 *   MPI_Gather R+1 (the +1 collects the checksums), MPI_Gatherv R,
 *   MPI_Scatter R, MPI_Scatterv R, MPI_Allgather R, MPI_Allgatherv R,
 *   MPI_Alltoall R, MPI_Alltoallv R, MPI_Reduce_scatter R,
 *   MPI_Reduce_scatter_block R, MPI_Scan R, MPI_Exscan R,
 *   MPI_Ibarrier R, MPI_Ibcast R, MPI_Iallreduce R, MPI_Wait 3R
 * Totals over all ranks: P times the above.
 * Sizes: rank r contributes VLEN(r) = r+1 ints to the "v" collectives;
 * fixed-size collectives move BLOCK = 4 ints per rank pair.
 *
 * stdout (rank 0 only): one checksum line per rank, in rank order.
 */
#include <mpi.h>
#include "common.h"

#define BLOCK 4
#define VLEN(r) ((r) + 1)

static uint64_t fold_ints(uint64_t hash, const int *values, long n)
{
    for (long i = 0; i < n; i++)
        hash = fold64(hash, (uint64_t)(uint32_t)values[i]);
    return hash;
}

static int value(int rank, int round, int i)
{
    return (rank + 1) * 1000 + round * 100 + i;
}

int main(int argc, char **argv)
{
    long rounds = flag_value(argc, argv, "--rounds", 2);
    int rank, size;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);

    /* Sized for the largest use: P blocks of BLOCK, or sum of VLEN over ranks. */
    long vtotal = (long)size * (size + 1) / 2;
    long cap = (long)size * BLOCK > vtotal ? (long)size * BLOCK : vtotal;
    cap += BLOCK;
    int *send = calloc((size_t)cap, sizeof(int));
    int *recv = calloc((size_t)cap, sizeof(int));
    int *counts = calloc((size_t)size, sizeof(int));
    int *displs = calloc((size_t)size, sizeof(int));
    int *scounts = calloc((size_t)size, sizeof(int));
    int *sdispls = calloc((size_t)size, sizeof(int));
    if (!send || !recv || !counts || !displs || !scounts || !sdispls) {
        fprintf(stderr, "out of memory\n");
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    for (int r = 0, at = 0; r < size; r++) {
        counts[r] = VLEN(r);
        displs[r] = at;
        at += VLEN(r);
    }

    uint64_t hash = FOLD_SEED;
    for (int round = 0; round < rounds; round++) {
        int root = round % size;
        int mine = VLEN(rank);

        MPI_Barrier(MPI_COMM_WORLD);

        for (int i = 0; i < BLOCK; i++)
            recv[i] = rank == root ? value(rank, round, i) : -1;
        MPI_Bcast(recv, BLOCK, MPI_INT, root, MPI_COMM_WORLD);
        hash = fold_ints(hash, recv, BLOCK);

        for (int i = 0; i < BLOCK; i++)
            send[i] = value(rank, round, i);
        MPI_Reduce(send, recv, BLOCK, MPI_INT, MPI_SUM, root, MPI_COMM_WORLD);
        if (rank == root)
            hash = fold_ints(hash, recv, BLOCK);

        MPI_Allreduce(send, recv, BLOCK, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
        hash = fold_ints(hash, recv, BLOCK);

        MPI_Gather(send, BLOCK, MPI_INT, recv, BLOCK, MPI_INT, root, MPI_COMM_WORLD);
        if (rank == root)
            hash = fold_ints(hash, recv, (long)size * BLOCK);

        for (int i = 0; i < mine; i++)
            send[i] = value(rank, round, i + 10);
        MPI_Gatherv(send, mine, MPI_INT, recv, counts, displs, MPI_INT, root, MPI_COMM_WORLD);
        if (rank == root)
            hash = fold_ints(hash, recv, vtotal);

        for (int i = 0; i < size * BLOCK; i++)
            send[i] = value(rank, round, i + 20);
        MPI_Scatter(send, BLOCK, MPI_INT, recv, BLOCK, MPI_INT, root, MPI_COMM_WORLD);
        hash = fold_ints(hash, recv, BLOCK);

        for (long i = 0; i < vtotal; i++)
            send[i] = value(rank, round, (int)i + 30);
        MPI_Scatterv(send, counts, displs, MPI_INT, recv, mine, MPI_INT, root, MPI_COMM_WORLD);
        hash = fold_ints(hash, recv, mine);

        for (int i = 0; i < BLOCK; i++)
            send[i] = value(rank, round, i + 40);
        MPI_Allgather(send, BLOCK, MPI_INT, recv, BLOCK, MPI_INT, MPI_COMM_WORLD);
        hash = fold_ints(hash, recv, (long)size * BLOCK);

        for (int i = 0; i < mine; i++)
            send[i] = value(rank, round, i + 50);
        MPI_Allgatherv(send, mine, MPI_INT, recv, counts, displs, MPI_INT, MPI_COMM_WORLD);
        hash = fold_ints(hash, recv, vtotal);

        for (int i = 0; i < size * BLOCK; i++)
            send[i] = value(rank, round, i + 60);
        MPI_Alltoall(send, BLOCK, MPI_INT, recv, BLOCK, MPI_INT, MPI_COMM_WORLD);
        hash = fold_ints(hash, recv, (long)size * BLOCK);

        /* Rank r sends VLEN(d) ints to rank d and so receives VLEN(r) from everyone. */
        int sat = 0;
        for (int d = 0; d < size; d++) {
            scounts[d] = VLEN(d);
            sdispls[d] = sat;
            sat += VLEN(d);
        }
        for (int i = 0; i < sat; i++)
            send[i] = value(rank, round, i + 70);
        int *rcounts = calloc((size_t)size, sizeof(int));
        int *rdispls = calloc((size_t)size, sizeof(int));
        int *rbuf = calloc((size_t)size * (size_t)mine, sizeof(int));
        if (!rcounts || !rdispls || !rbuf) {
            fprintf(stderr, "out of memory\n");
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
        for (int s = 0; s < size; s++) {
            rcounts[s] = mine;
            rdispls[s] = s * mine;
        }
        MPI_Alltoallv(send, scounts, sdispls, MPI_INT, rbuf, rcounts, rdispls, MPI_INT, MPI_COMM_WORLD);
        hash = fold_ints(hash, rbuf, (long)size * mine);
        free(rcounts);
        free(rdispls);
        free(rbuf);

        /* Each rank keeps VLEN(r) elements of the element-wise sum. */
        for (long i = 0; i < vtotal; i++)
            send[i] = value(rank, round, (int)i + 80);
        MPI_Reduce_scatter(send, recv, counts, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
        hash = fold_ints(hash, recv, mine);

        for (int i = 0; i < size * BLOCK; i++)
            send[i] = value(rank, round, i + 90);
        MPI_Reduce_scatter_block(send, recv, BLOCK, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
        hash = fold_ints(hash, recv, BLOCK);

        for (int i = 0; i < BLOCK; i++)
            send[i] = value(rank, round, i + 100);
        MPI_Scan(send, recv, BLOCK, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
        hash = fold_ints(hash, recv, BLOCK);

        MPI_Exscan(send, recv, BLOCK, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
        if (rank != 0) /* rank 0's Exscan result is undefined */
            hash = fold_ints(hash, recv, BLOCK);

        MPI_Request req;
        MPI_Ibarrier(MPI_COMM_WORLD, &req);
        MPI_Wait(&req, MPI_STATUS_IGNORE);

        for (int i = 0; i < BLOCK; i++)
            recv[i] = rank == root ? value(rank, round, i + 110) : -1;
        MPI_Ibcast(recv, BLOCK, MPI_INT, root, MPI_COMM_WORLD, &req);
        MPI_Wait(&req, MPI_STATUS_IGNORE);
        hash = fold_ints(hash, recv, BLOCK);

        for (int i = 0; i < BLOCK; i++)
            send[i] = value(rank, round, i + 120);
        MPI_Iallreduce(send, recv, BLOCK, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &req);
        MPI_Wait(&req, MPI_STATUS_IGNORE);
        hash = fold_ints(hash, recv, BLOCK);
    }

    uint64_t *all = calloc((size_t)size, sizeof *all);
    if (all == NULL) {
        fprintf(stderr, "out of memory\n");
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    MPI_Gather(&hash, 1, MPI_UINT64_T, all, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD);
    if (rank == 0) {
        printf("collectives ranks=%d rounds=%ld\n", size, rounds);
        for (int r = 0; r < size; r++)
            printf("rank %d checksum=%016llx\n", r, (unsigned long long)all[r]);
    }
    free(all);
    free(send);
    free(recv);
    free(counts);
    free(displs);
    free(scounts);
    free(sdispls);
    MPI_Finalize();
    return 0;
}
