/*
 * Communicators that ranks make in different orders, legally (tests/clean_runs.rs): MPI orders
 * the constructors called on one parent communicator, not those on different parents. Run on 4
 * ranks (any even number of at least 4 works).
 *
 * P1 and P2 are duplicates of MPI_COMM_WORLD (same members, same order everywhere). Then:
 *   - X1 = Comm_idup(P1), X2 = Comm_idup(P2), X3 = Comm_idup(MPI_COMM_WORLD), started in that
 *     order on even ranks and in the opposite order on odd ranks, completed by one Waitall. All
 *     three have the members of the world: a reader that tells communicators apart by members
 *     and by the order a rank made them crosses them on odd ranks.
 *   - On P1, a Comm_split in which rank 0 passes MPI_UNDEFINED (it gets MPI_COMM_NULL), then a
 *     Comm_dup D of P1: the split counts on P1 on rank 0 too.
 *   - H = the half of the world a rank is in (one Comm_split of the world makes both halves); on
 *     each half, Comm_create_group(MPI_COMM_WORLD, half's group, tag 7) twice: G1, G2.
 * Then N = --iterations (default 10) times: on each of X1, X2, X3, D, G1, G2, H in turn, a ring
 * exchange (Sendrecv to the right, from the left, tag = the communicator's number, the value
 * checked) and an Allreduce of the rank, checked; X1 and X2 also a Bcast from rank 1.
 * Prints "commorder: errors=0" (rank 0) when every value was right.
 */
#include <mpi.h>

#include "common.h"

static int errors;

static void exchange(MPI_Comm comm, int number, long iteration)
{
    int rank, size;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    int right = (rank + 1) % size, left = (rank + size - 1) % size;
    int out = number * 100000 + rank * 100 + (int)iteration, in = -1;
    MPI_Sendrecv(&out, 1, MPI_INT, right, number, &in, 1, MPI_INT, left, number, comm, MPI_STATUS_IGNORE);
    if (in != number * 100000 + left * 100 + (int)iteration) errors++;
    int sum = 0;
    MPI_Allreduce(&rank, &sum, 1, MPI_INT, MPI_SUM, comm);
    if (sum != size * (size - 1) / 2) errors++;
}

int main(int argc, char **argv)
{
    long iterations = flag_value(argc, argv, "--iterations", 10);
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size < 4 || size % 2 != 0) {
        if (rank == 0) fprintf(stderr, "commorder needs an even number of at least 4 ranks\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }

    MPI_Comm p1, p2;
    MPI_Comm_dup(MPI_COMM_WORLD, &p1);
    MPI_Comm_dup(MPI_COMM_WORLD, &p2);

    MPI_Comm x1, x2, x3;
    MPI_Request reqs[3];
    if (rank % 2 == 0) {
        MPI_Comm_idup(p1, &x1, &reqs[0]);
        MPI_Comm_idup(p2, &x2, &reqs[1]);
        MPI_Comm_idup(MPI_COMM_WORLD, &x3, &reqs[2]);
    } else {
        MPI_Comm_idup(MPI_COMM_WORLD, &x3, &reqs[2]);
        MPI_Comm_idup(p2, &x2, &reqs[1]);
        MPI_Comm_idup(p1, &x1, &reqs[0]);
    }
    MPI_Waitall(3, reqs, MPI_STATUSES_IGNORE);

    MPI_Comm none, d;
    MPI_Comm_split(p1, rank == 0 ? MPI_UNDEFINED : 0, rank, &none);
    if ((rank == 0) != (none == MPI_COMM_NULL)) errors++;
    MPI_Comm_dup(p1, &d);

    MPI_Comm half;
    MPI_Comm_split(MPI_COMM_WORLD, rank < size / 2, rank, &half);
    MPI_Group half_group;
    MPI_Comm_group(half, &half_group);
    MPI_Comm g1, g2;
    MPI_Comm_create_group(MPI_COMM_WORLD, half_group, 7, &g1);
    MPI_Comm_create_group(MPI_COMM_WORLD, half_group, 7, &g2);
    MPI_Group_free(&half_group);

    MPI_Comm comms[7] = {x1, x2, x3, d, g1, g2, half};
    for (long it = 0; it < iterations; it++) {
        for (int c = 0; c < 7; c++) exchange(comms[c], c + 1, it);
        for (int c = 0; c < 2; c++) {
            int v = rank == 1 ? (int)it + c : -1;
            MPI_Bcast(&v, 1, MPI_INT, 1, comms[c]);
            if (v != (int)it + c) errors++;
        }
    }

    int total = 0;
    MPI_Reduce(&errors, &total, 1, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0) printf("commorder: errors=%d\n", total);
    for (int c = 0; c < 7; c++) MPI_Comm_free(&comms[c]);
    if (none != MPI_COMM_NULL) MPI_Comm_free(&none);
    MPI_Comm_free(&p1);
    MPI_Comm_free(&p2);
    MPI_Finalize();
    return 0;
}
