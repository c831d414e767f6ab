/*
 * halo.c - 1-D periodic domain split over the ranks; every iteration swaps
 * one ghost cell with each neighbour using nonblocking point-to-point, then
 * applies an integer 3-point stencil and sums the domain with MPI_Allreduce.
 * Integer arithmetic keeps the result bit-identical whatever the reduction
 * order of the MPI library.
 *
 * Usage: halo [--iterations N] [--cells C]   (defaults N = 40, C = 1024 per rank)
 *
 * Exact MPI calls per rank (P ranks, N iterations):
 *   MPI_Init 1, MPI_Comm_rank 1, MPI_Comm_size 1,
 *   MPI_Irecv 2N, MPI_Isend 2N, MPI_Waitall N (4 requests each),
 *   MPI_Allreduce N, MPI_Finalize 1
 * Totals over all ranks: Irecv = Isend = 2*P*N, Waitall = Allreduce = P*N.
 * Peers: left = (r-1+P)%P, right = (r+1)%P (equal when P = 2), 8-byte messages;
 * tag 1 travels rightwards, tag 2 leftwards.
 *
 * stdout (rank 0 only): one line with P, N, C and a checksum of every
 * iteration's global sum.
 */
#include <mpi.h>
#include "common.h"

#define TAG_RIGHTWARDS 1
#define TAG_LEFTWARDS 2
#define MODULUS 1000003

int main(int argc, char **argv)
{
    long iterations = flag_value(argc, argv, "--iterations", 40);
    long cells = flag_value(argc, argv, "--cells", 1024);
    if (cells < 1) {
        fprintf(stderr, "--cells must be at least 1\n");
        return 2;
    }
    int rank, size;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int left = (rank - 1 + size) % size;
    int right = (rank + 1) % size;

    /* u[0] and u[cells+1] are the ghost cells. */
    int64_t *u = calloc((size_t)cells + 2, sizeof *u);
    int64_t *next = calloc((size_t)cells + 2, sizeof *next);
    if (u == NULL || next == NULL) {
        fprintf(stderr, "out of memory\n");
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    for (long i = 1; i <= cells; i++)
        u[i] = ((int64_t)rank * cells + i) % MODULUS;

    uint64_t checksum = FOLD_SEED;
    for (long it = 0; it < iterations; it++) {
        MPI_Request reqs[4];
        MPI_Status statuses[4];
        MPI_Irecv(&u[0], 1, MPI_INT64_T, left, TAG_RIGHTWARDS, MPI_COMM_WORLD, &reqs[0]);
        MPI_Irecv(&u[cells + 1], 1, MPI_INT64_T, right, TAG_LEFTWARDS, MPI_COMM_WORLD, &reqs[1]);
        MPI_Isend(&u[cells], 1, MPI_INT64_T, right, TAG_RIGHTWARDS, MPI_COMM_WORLD, &reqs[2]);
        MPI_Isend(&u[1], 1, MPI_INT64_T, left, TAG_LEFTWARDS, MPI_COMM_WORLD, &reqs[3]);
        MPI_Waitall(4, reqs, statuses);

        int64_t local = 0;
        for (long i = 1; i <= cells; i++) {
            next[i] = (u[i - 1] + 2 * u[i] + u[i + 1] + it) % MODULUS;
            local += next[i];
        }
        int64_t *swap = u;
        u = next;
        next = swap;

        int64_t global = 0;
        MPI_Allreduce(&local, &global, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
        checksum = fold64(checksum, (uint64_t)global);
    }

    if (rank == 0)
        printf("halo ranks=%d iterations=%ld cells=%ld checksum=%016llx\n", size, iterations, cells,
               (unsigned long long)checksum);
    free(u);
    free(next);
    MPI_Finalize();
    return 0;
}
