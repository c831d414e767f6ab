/*
 * One-sided communication, MPI-IO and communicator shapes for the OTF2 export's records
 * (tests/otf2_records.rs). Run on an even number of ranks (4 by default in the test).
 *
 * Per iteration (--iterations N, default 3), on a window over MPI_COMM_WORLD:
 *   fence; Put to the right, Get from the left, Accumulate to the right; fence;
 *   Win_lock(right); Put; Fetch_and_op; Compare_and_swap; Win_unlock(right);
 *   Win_lock_all; Rput + Wait; Rget + Wait; Win_flush(right); Win_flush_local_all; Win_unlock_all;
 * then a window allocated over the even/odd half communicator: fence, Put to the next in the half,
 * fence, free.
 * MPI-IO: a shared file opened on MPI_COMM_WORLD and a private one on MPI_COMM_SELF (two open at
 * once on every rank): write_at, write_at_all, read_at, iread_at + Wait, iwrite_at + Wait, a split
 * collective write, seek + write + sync on the private file; both closed; rank 0 deletes them.
 * Communicators: a split into halves, a duplicate of the world, and an intercommunicator between
 * the halves with a Sendrecv across it.
 * The files go to --dir DIR (default $TMPDIR or /tmp).
 * Prints a checksum of what the one-sided calls moved (rank 0).
 */
#include <mpi.h>

#include "common.h"

int main(int argc, char **argv)
{
    long iterations = flag_value(argc, argv, "--iterations", 3);
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size % 2 != 0) {
        if (rank == 0) fprintf(stderr, "rma_io needs an even number of ranks\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    int right = (rank + 1) % size, left = (rank + size - 1) % size;

    MPI_Comm half, dup, inter;
    MPI_Comm_split(MPI_COMM_WORLD, rank % 2, rank, &half);
    MPI_Comm_dup(MPI_COMM_WORLD, &dup);
    int half_rank, half_size;
    MPI_Comm_rank(half, &half_rank);
    MPI_Comm_size(half, &half_size);
    /* The other half's leader is world rank 1 (for the even half) or 0 (for the odd one). */
    MPI_Intercomm_create(half, 0, MPI_COMM_WORLD, rank % 2 == 0 ? 1 : 0, 21, &inter);
    int got = -1;
    MPI_Sendrecv(&rank, 1, MPI_INT, half_rank, 22, &got, 1, MPI_INT, half_rank, 22, inter,
                 MPI_STATUS_IGNORE);
    MPI_Barrier(dup);

    int *base;
    MPI_Win win;
    MPI_Win_allocate(8 * sizeof(int), sizeof(int), MPI_INFO_NULL, MPI_COMM_WORLD, &base, &win);
    for (int i = 0; i < 8; i++) base[i] = 0;
    int a[4] = {rank, rank + 1, rank + 2, rank + 3}, b[4] = {0};
    uint64_t sum = 0;
    for (long it = 0; it < iterations; it++) {
        MPI_Win_fence(0, win);
        MPI_Put(a, 2, MPI_INT, right, 0, 2, MPI_INT, win);
        MPI_Get(b, 2, MPI_INT, left, 2, 2, MPI_INT, win);
        MPI_Accumulate(a, 1, MPI_INT, right, 4, 1, MPI_INT, MPI_SUM, win);
        MPI_Win_fence(0, win);
        sum = fold64(sum, (uint64_t)(b[0] + b[1]));

        MPI_Win_lock(MPI_LOCK_EXCLUSIVE, right, 0, win);
        MPI_Put(a, 1, MPI_INT, right, 5, 1, MPI_INT, win);
        int one = 1, old = 0, cmp = 0, swapped = 0;
        MPI_Fetch_and_op(&one, &old, MPI_INT, right, 6, MPI_SUM, win);
        MPI_Compare_and_swap(&one, &cmp, &swapped, MPI_INT, right, 7, win);
        MPI_Win_unlock(right, win);
        sum = fold64(sum, (uint64_t)old);

        MPI_Win_lock_all(0, win);
        MPI_Request r;
        MPI_Rput(a, 4, MPI_INT, right, 0, 4, MPI_INT, win, &r);
        MPI_Wait(&r, MPI_STATUS_IGNORE);
        MPI_Rget(b, 3, MPI_INT, left, 0, 3, MPI_INT, win, &r);
        MPI_Wait(&r, MPI_STATUS_IGNORE);
        MPI_Win_flush(right, win);
        MPI_Win_flush_local_all(win);
        MPI_Win_unlock_all(win);
        MPI_Barrier(MPI_COMM_WORLD);
    }
    MPI_Win_free(&win);

    /* The halves take turns: with both allocating at once, Open MPI 4.1.4's shared-memory
     * windows failed now and then in MPI_Win_allocate ("open(2) ... No such file or directory"
     * while attaching the backing file; 2 runs in about 8, cause inside Open MPI not found). */
    for (int turn = 0; turn < 2; turn++) {
        if (rank % 2 == turn) {
            int *hbase;
            MPI_Win hwin;
            MPI_Win_allocate(4 * sizeof(int), sizeof(int), MPI_INFO_NULL, half, &hbase, &hwin);
            MPI_Win_fence(0, hwin);
            MPI_Put(&rank, 1, MPI_INT, (half_rank + 1) % half_size, 0, 1, MPI_INT, hwin);
            MPI_Win_fence(0, hwin);
            sum = fold64(sum, (uint64_t)hbase[0]);
            MPI_Win_free(&hwin);
        }
        MPI_Barrier(MPI_COMM_WORLD);
    }

    const char *dir = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    for (int i = 1; i + 1 < argc; i++)
        if (strcmp(argv[i], "--dir") == 0) dir = argv[i + 1];
    char shared[512], mine[512];
    snprintf(shared, sizeof shared, "%s/evf_rma_io.bin", dir);
    snprintf(mine, sizeof mine, "%s/evf_rma_io_%d.bin", dir, rank);
    MPI_File fh, own;
    MPI_File_open(MPI_COMM_WORLD, shared, MPI_MODE_CREATE | MPI_MODE_RDWR, MPI_INFO_NULL, &fh);
    MPI_File_open(MPI_COMM_SELF, mine, MPI_MODE_CREATE | MPI_MODE_RDWR, MPI_INFO_NULL, &own);
    MPI_Offset at = (MPI_Offset)rank * 64;
    MPI_File_write_at(fh, at, a, 4, MPI_INT, MPI_STATUS_IGNORE);
    MPI_File_write_at_all(fh, at + 16, a, 4, MPI_INT, MPI_STATUS_IGNORE);
    MPI_File_read_at(fh, at, b, 4, MPI_INT, MPI_STATUS_IGNORE);
    MPI_Request io[2];
    MPI_File_iread_at(fh, at + 16, b, 2, MPI_INT, &io[0]);
    MPI_Wait(&io[0], MPI_STATUS_IGNORE);
    MPI_File_iwrite_at(fh, at + 32, a, 3, MPI_INT, &io[1]);
    MPI_Wait(&io[1], MPI_STATUS_IGNORE);
    MPI_File_write_at_all_begin(fh, at + 48, a, 2, MPI_INT);
    MPI_File_write_at_all_end(fh, a, MPI_STATUS_IGNORE);
    MPI_File_seek(own, 0, MPI_SEEK_SET);
    MPI_File_write(own, a, 4, MPI_INT, MPI_STATUS_IGNORE);
    MPI_File_sync(own);
    MPI_File_close(&own);
    MPI_File_close(&fh);
    sum = fold64(sum, (uint64_t)b[0]);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) MPI_File_delete(shared, MPI_INFO_NULL);
    MPI_File_delete(mine, MPI_INFO_NULL);

    MPI_Comm_free(&inter);
    MPI_Comm_free(&dup);
    MPI_Comm_free(&half);
    uint64_t total = 0;
    MPI_Reduce(&sum, &total, 1, MPI_UINT64_T, MPI_BXOR, 0, MPI_COMM_WORLD);
    MPI_Finalize();
    if (rank == 0) printf("rma_io ranks=%d iterations=%ld checksum=%016llx\n", size, iterations,
                          (unsigned long long)total);
    return 0;
}
