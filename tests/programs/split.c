/*
 * split.c - MPI_Comm_split of the world into evens (color 0) and odds
 * (color 1). The key reverses the order, so sub-rank 0 is the HIGHEST world
 * rank of its color: a recorder that stores sub-communicator ranks as if
 * they were world ranks gets every peer and root wrong. On each
 * sub-communicator: Bcast, Reduce to sub-rank 1, Allreduce, and a pairwise
 * Send/Recv between sub-ranks (0,1), (2,3), ...; then the same pairs talk
 * again on an MPI_Comm_dup of it, which is also used for a Barrier and an
 * Allreduce before both communicators are freed.
 *
 * Usage: split        (meant for P = 4: two sub-communicators of 2 ranks)
 *
 * Exact MPI calls per rank (any P >= 2; S = size of the rank's
 * sub-communicator; "paired" = the rank has a partner, i.e. not the last
 * sub-rank of an odd-sized sub-communicator):
 *   MPI_Init 1, MPI_Comm_rank 2, MPI_Comm_size 2, MPI_Comm_split 1,
 *   MPI_Bcast 1, MPI_Reduce 1, MPI_Allreduce 2, MPI_Comm_dup 1,
 *   MPI_Barrier 1, MPI_Send 2 if paired else 0, MPI_Recv 2 if paired else 0,
 *   MPI_Gather 1 (world, checksums to rank 0), MPI_Comm_free 2, MPI_Finalize 1
 * For P = 4 every rank is paired: totals = 4 times the above with Send = Recv = 8.
 * Mapping for P = 4: evens {sub0 = world 2, sub1 = world 0},
 *                    odds  {sub0 = world 3, sub1 = world 1}.
 * Sub-rank 0 (world 2 / 3) sends to sub-rank 1 (world 0 / 1) first, tag 21 on
 * the split communicator and tag 22 on its duplicate; the partner answers.
 *
 * stdout (rank 0 only): one line per world rank with its color, sub-rank and
 * checksum, in world-rank order.
 */
#include <mpi.h>
#include "common.h"

#define PAIR_LEN 8
#define TAG_SPLIT 21
#define TAG_DUP 22

static uint64_t pair_exchange(MPI_Comm comm, int sub_rank, int sub_size, int tag, int world_rank,
                              uint64_t hash)
{
    int partner = sub_rank % 2 == 0 ? sub_rank + 1 : sub_rank - 1;
    if (partner >= sub_size)
        return hash;
    int64_t out[PAIR_LEN], in[PAIR_LEN];
    for (int i = 0; i < PAIR_LEN; i++)
        out[i] = (int64_t)world_rank * 100 + tag * 10 + i;
    if (sub_rank % 2 == 0) {
        MPI_Send(out, PAIR_LEN, MPI_INT64_T, partner, tag, comm);
        MPI_Recv(in, PAIR_LEN, MPI_INT64_T, partner, tag, comm, MPI_STATUS_IGNORE);
    } else {
        MPI_Recv(in, PAIR_LEN, MPI_INT64_T, partner, tag, comm, MPI_STATUS_IGNORE);
        MPI_Send(out, PAIR_LEN, MPI_INT64_T, partner, tag, comm);
    }
    for (int i = 0; i < PAIR_LEN; i++)
        hash = fold64(hash, (uint64_t)in[i]);
    return hash;
}

int main(int argc, char **argv)
{
    int rank, size;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);

    int color = rank % 2;
    MPI_Comm sub;
    MPI_Comm_split(MPI_COMM_WORLD, color, size - rank, &sub);
    int sub_rank, sub_size;
    MPI_Comm_rank(sub, &sub_rank);
    MPI_Comm_size(sub, &sub_size);

    uint64_t hash = FOLD_SEED;
    int64_t word = sub_rank == 0 ? (int64_t)rank * 7 + 3 : -1;
    MPI_Bcast(&word, 1, MPI_INT64_T, 0, sub);
    hash = fold64(hash, (uint64_t)word);

    int64_t contribution = (int64_t)rank + 1, total = 0;
    int reduce_root = 1 % sub_size;
    MPI_Reduce(&contribution, &total, 1, MPI_INT64_T, MPI_SUM, reduce_root, sub);
    if (sub_rank == reduce_root)
        hash = fold64(hash, (uint64_t)total);

    MPI_Allreduce(&contribution, &total, 1, MPI_INT64_T, MPI_MAX, sub);
    hash = fold64(hash, (uint64_t)total);

    hash = pair_exchange(sub, sub_rank, sub_size, TAG_SPLIT, rank, hash);

    MPI_Comm dup;
    MPI_Comm_dup(sub, &dup);
    hash = pair_exchange(dup, sub_rank, sub_size, TAG_DUP, rank, hash);
    MPI_Barrier(dup);
    MPI_Allreduce(&contribution, &total, 1, MPI_INT64_T, MPI_SUM, dup);
    hash = fold64(hash, (uint64_t)total);

    uint64_t mine[3] = {(uint64_t)color, (uint64_t)sub_rank, hash};
    uint64_t *all = calloc((size_t)size * 3, sizeof *all);
    if (all == NULL) {
        fprintf(stderr, "out of memory\n");
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    MPI_Gather(mine, 3, MPI_UINT64_T, all, 3, MPI_UINT64_T, 0, MPI_COMM_WORLD);
    if (rank == 0) {
        printf("split ranks=%d\n", size);
        for (int r = 0; r < size; r++)
            printf("world %d color=%llu sub_rank=%llu checksum=%016llx\n", r, (unsigned long long)all[3 * r],
                   (unsigned long long)all[3 * r + 1], (unsigned long long)all[3 * r + 2]);
    }
    free(all);
    MPI_Comm_free(&dup);
    MPI_Comm_free(&sub);
    MPI_Finalize();
    return 0;
}
