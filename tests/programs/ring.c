/*
 * ring.c - a token of TOKEN_LEN 64-bit words travels around all ranks, N times,
 * with blocking MPI_Send/MPI_Recv. Rank 0 starts each lap (send, then receive);
 * every other rank receives from its left neighbour, updates the token and
 * passes it on, so the result depends on every hop and on the order of ranks.
 *
 * Usage: ring [--iterations N]      (default N = 100; requires P >= 2)
 *
 * Exact MPI calls per rank (P ranks, N iterations):
 *   MPI_Init 1, MPI_Comm_rank 1, MPI_Comm_size 1,
 *   MPI_Send N, MPI_Recv N, MPI_Finalize 1
 * Totals over all ranks: Send = Recv = P*N, the others P each.
 * Peers: rank r sends to (r+1)%P and receives from (r-1+P)%P, tag 7, 128 bytes.
 *
 * stdout (rank 0 only): one line with P, N and the token checksum.
 */
#include <mpi.h>
#include "common.h"

#define TOKEN_LEN 16
#define RING_TAG 7

static void touch_token(uint64_t *token, int rank, long lap)
{
    for (int i = 0; i < TOKEN_LEN; i++)
        token[i] = token[i] * 1099511628211ULL + (uint64_t)(rank + 1) * (uint64_t)(i + 1) + (uint64_t)lap;
}

int main(int argc, char **argv)
{
    long iterations = flag_value(argc, argv, "--iterations", 100);
    int rank, size;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size < 2) {
        if (rank == 0)
            fprintf(stderr, "ring needs at least 2 ranks\n");
        MPI_Finalize();
        return 1;
    }

    int right = (rank + 1) % size;
    int left = (rank - 1 + size) % size;
    uint64_t token[TOKEN_LEN];
    for (int i = 0; i < TOKEN_LEN; i++)
        token[i] = (uint64_t)i;

    for (long lap = 0; lap < iterations; lap++) {
        if (rank == 0) {
            touch_token(token, rank, lap);
            MPI_Send(token, TOKEN_LEN, MPI_UINT64_T, right, RING_TAG, MPI_COMM_WORLD);
            MPI_Recv(token, TOKEN_LEN, MPI_UINT64_T, left, RING_TAG, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else {
            MPI_Recv(token, TOKEN_LEN, MPI_UINT64_T, left, RING_TAG, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            touch_token(token, rank, lap);
            MPI_Send(token, TOKEN_LEN, MPI_UINT64_T, right, RING_TAG, MPI_COMM_WORLD);
        }
    }

    if (rank == 0) {
        uint64_t sum = FOLD_SEED;
        for (int i = 0; i < TOKEN_LEN; i++)
            sum = fold64(sum, token[i]);
        printf("ring ranks=%d iterations=%ld checksum=%016llx\n", size, iterations, (unsigned long long)sum);
    }
    MPI_Finalize();
    return 0;
}
