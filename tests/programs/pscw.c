/*
 * General active target synchronisation (MPI_Win_post / MPI_Win_start / MPI_Win_complete /
 * MPI_Win_wait) for the happened-before matcher (tests/clean_runs.rs). Run on 3 or more ranks
 * (4 in the test), so that a rank's left and right neighbours differ.
 *
 * One window made with MPI_Win_create over MPI_COMM_WORLD on malloc'd memory (not
 * MPI_Win_allocate, which failed now and then under Open MPI, see rma_io.c). P ranks,
 * N = --iterations (default 10):
 *   ring phase, N iterations: Win_post(group {left}); Win_start(group {right}); Put of one int to
 *     the right; Win_complete; Win_wait; the value the left neighbour put is checked;
 *   pair phase, N iterations: Win_post(group {left, right}); Win_start(group {left, right}); Put
 *     to the right (slot 0) and to the left (slot 1); Win_complete; Win_wait; both values checked.
 *   An MPI_Barrier ends each phase; two MPI_Reduce gather the checksum and the error count.
 * Calls per rank: 2N each of Win_post, Win_start, Win_complete, Win_wait; 3N Put.
 * Epoch pairs (a target's Win_wait with one origin's Win_complete): P·N in the ring phase, 2·P·N
 * in the pair phase, 3·P·N in all (120 for P = 4, N = 10). Every one of them is matched.
 * Prints a checksum of the values received (rank 0) and "errors=0" when every value was right.
 */
#include <mpi.h>

#include "common.h"

static int value(int origin, long iteration, int slot) { return origin * 1000 + (int)iteration * 10 + slot; }

int main(int argc, char **argv)
{
    long iterations = flag_value(argc, argv, "--iterations", 10);
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size < 3) {
        if (rank == 0) fprintf(stderr, "pscw needs at least 3 ranks\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    int right = (rank + 1) % size, left = (rank + size - 1) % size;

    int *base = (int *)calloc(2, sizeof(int));
    if (base == NULL) MPI_Abort(MPI_COMM_WORLD, 3);
    MPI_Win win;
    MPI_Win_create(base, 2 * sizeof(int), sizeof(int), MPI_INFO_NULL, MPI_COMM_WORLD, &win);

    MPI_Group world, left_group, right_group, both;
    MPI_Comm_group(MPI_COMM_WORLD, &world);
    MPI_Group_incl(world, 1, &left, &left_group);
    MPI_Group_incl(world, 1, &right, &right_group);
    int pair[2] = {left, right};
    MPI_Group_incl(world, 2, pair, &both);

    uint64_t sum = 0;
    long errors = 0;
    for (long i = 0; i < iterations; i++) {
        MPI_Win_post(left_group, 0, win);
        MPI_Win_start(right_group, 0, win);
        int mine = value(rank, i, 0);
        MPI_Put(&mine, 1, MPI_INT, right, 0, 1, MPI_INT, win);
        MPI_Win_complete(win);
        MPI_Win_wait(win);
        errors += base[0] != value(left, i, 0);
        sum = fold64(sum, (uint64_t)base[0]);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    for (long i = 0; i < iterations; i++) {
        MPI_Win_post(both, 0, win);
        MPI_Win_start(both, 0, win);
        int to_right = value(rank, i, 0), to_left = value(rank, i, 1);
        MPI_Put(&to_right, 1, MPI_INT, right, 0, 1, MPI_INT, win);
        MPI_Put(&to_left, 1, MPI_INT, left, 1, 1, MPI_INT, win);
        MPI_Win_complete(win);
        MPI_Win_wait(win);
        errors += base[0] != value(left, i, 0);
        errors += base[1] != value(right, i, 1);
        sum = fold64(sum, (uint64_t)base[0]);
        sum = fold64(sum, (uint64_t)base[1]);
    }
    MPI_Barrier(MPI_COMM_WORLD);

    uint64_t all = 0;
    long all_errors = 0;
    MPI_Reduce(&sum, &all, 1, MPI_UINT64_T, MPI_BXOR, 0, MPI_COMM_WORLD);
    MPI_Reduce(&errors, &all_errors, 1, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0) printf("pscw checksum=%016llx errors=%ld\n", (unsigned long long)all, all_errors);

    MPI_Group_free(&both);
    MPI_Group_free(&right_group);
    MPI_Group_free(&left_group);
    MPI_Group_free(&world);
    MPI_Win_free(&win);
    free(base);
    MPI_Finalize();
    return 0;
}
