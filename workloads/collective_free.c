/*
 * collective_free.c - a long phase without any collective (the paper's open problem 1): every
 * rank exchanges a small message with both ring neighbours N times with MPI_Sendrecv, then all
 * meet in one MPI_Barrier. A recorder that must bound its memory inside the phase can only
 * compress in memory or write alone; the barrier is the first chance to flush together.
 *
 * Usage: collective_free [--iterations N] [--phases K] [--scatter-tags 0|1] [--work W]
 *   (defaults N = 1000, K = 1, W = 0; P >= 2). K phases of N exchanges, each ending in the
 *   barrier; W steps of register arithmetic before each exchange (about 1 ns each), as a program
 *   computes between its messages (a bare exchange loop makes both ranks spin on each other, and
 *   its time then depends on how the two cores are shared more than on anything else).
 *   --scatter-tags 1 gives every message a pseudo-random tag and size, so the records compress
 *   poorly (the case where in-memory compression is not enough).
 *
 * Exact MPI calls per rank: MPI_Init 1, MPI_Comm_rank 1, MPI_Comm_size 1, MPI_Sendrecv K*N,
 * MPI_Barrier K, MPI_Finalize 1.
 *
 * stdout (rank 0 only): "collective_free P=<P> N=<N> K=<K> sum=<checksum> span_s=<seconds>", the
 * span from the end of MPI_Init to the start of MPI_Finalize on rank 0 (what `evenflush
 * reconstruct` reports as the reconstructed span, so the two compare directly).
 */
#include <mpi.h>
#include "common.h"

int main(int argc, char **argv)
{
    long iterations = flag_value(argc, argv, "--iterations", 1000);
    long scatter = flag_value(argc, argv, "--scatter-tags", 0);
    long phases = flag_value(argc, argv, "--phases", 1);
    long work = flag_value(argc, argv, "--work", 0);
    int rank, size;
    MPI_Init(&argc, &argv);
    double began = MPI_Wtime();
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size < 2) {
        if (rank == 0)
            fprintf(stderr, "collective_free needs at least 2 ranks\n");
        MPI_Finalize();
        return 1;
    }
    int right = (rank + 1) % size, left = (rank - 1 + size) % size;
    uint64_t out[8] = {0}, in[8] = {0}, sum = 0;
    /* Same sequence on every rank, so sender and receiver agree on each message's tag and size. */
    uint64_t lcg = 12345;
    for (long phase = 0; phase < phases; phase++) {
        for (long i = 0; i < iterations; i++) {
            int tag = 3, count = 8;
            if (scatter) {
                lcg = lcg * 6364136223846793005ULL + 1442695040888963407ULL;
                tag = (int)((lcg >> 33) % 30000);
                count = 1 + (int)((lcg >> 20) % 8);
            }
            uint64_t x = (uint64_t)i;
            for (long w = 0; w < work; w++)
                x = x * 2862933555777941757ULL + 3037000493ULL;
            out[0] = (uint64_t)i + (uint64_t)rank + (x >> 63);
            MPI_Sendrecv(out, count, MPI_UINT64_T, right, tag, in, count, MPI_UINT64_T, left, tag,
                         MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            sum += in[0];
        }
        MPI_Barrier(MPI_COMM_WORLD);
    }
    if (rank == 0)
        printf("collective_free P=%d N=%ld K=%ld sum=%llu span_s=%.6f\n", size, iterations, phases,
               (unsigned long long)sum, MPI_Wtime() - began);
    MPI_Finalize();
    return 0;
}
