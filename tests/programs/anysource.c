/*
 * anysource.c - rank 0 receives from every other rank with MPI_ANY_SOURCE and
 * MPI_ANY_TAG, in four phases separated by barriers (so each phase only
 * matches that phase's messages):
 *   A: blocking MPI_Recv with a status        (tag 100+s, 10*s+3 ints)
 *   B: MPI_Irecv + MPI_Wait with a status     (tag 200+s, 20*s+5 ints)
 *   C: MPI_Irecv + MPI_Wait(MPI_STATUS_IGNORE) (tag 300+s, 30*s+7 ints)
 *   D: blocking MPI_Recv(MPI_STATUS_IGNORE)   (tag 400+s, s+3 ints)
 * where s is the sender's rank. Arrival order is up to the network, so every
 * message carries its sender, tag and length in its first three ints; rank 0
 * checks them against the status where it has one, and prints per sender
 * in rank order, so stdout is the same whichever order messages matched in.
 * A recorder must log the real source/tag/size of these receives even when
 * the application asked for no status (phases C and D).
 *
 * Usage: anysource        (P >= 2; the tests use P = 4)
 *
 * Exact MPI calls (P ranks):
 *   every rank: MPI_Init 1, MPI_Comm_rank 1, MPI_Comm_size 1, MPI_Barrier 3,
 *               MPI_Finalize 1
 *   rank 0:     MPI_Recv 2(P-1), MPI_Irecv 2(P-1), MPI_Wait 2(P-1),
 *               MPI_Get_count 2(P-1)  (phases A and B)
 *   rank s>0:   MPI_Send 4
 * Totals for P = 4: Send 12, Recv 6, Irecv 6, Wait 6, Get_count 6,
 *                   Barrier 12, Init/Comm_rank/Comm_size/Finalize 4 each.
 *
 * stdout (rank 0 only): per sender one line with the tags, sizes and a
 * checksum of its four messages.
 */
#include <mpi.h>
#include "common.h"

#define PHASES 4

static int phase_tag(int phase, int sender) { return (phase + 1) * 100 + sender; }

static int phase_len(int phase, int sender)
{
    static const int per_sender[PHASES] = {10, 20, 30, 1};
    static const int offset[PHASES] = {3, 5, 7, 3};
    return per_sender[phase] * sender + offset[phase];
}

static void fail(const char *what, int phase, int sender)
{
    fprintf(stderr, "anysource: %s mismatch in phase %c from %d\n", what, 'A' + phase, sender);
    MPI_Abort(MPI_COMM_WORLD, 3);
}

int main(int argc, char **argv)
{
    int rank, size;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size < 2) {
        if (rank == 0)
            fprintf(stderr, "anysource needs at least 2 ranks\n");
        MPI_Finalize();
        return 1;
    }

    int cap = phase_len(2, size - 1); /* phase C has the longest messages */
    int *buf = calloc((size_t)cap, sizeof(int));
    /* received[sender][phase] = {tag, len, checksum}; filled by rank 0 */
    uint64_t *received = calloc((size_t)size * PHASES * 3, sizeof(uint64_t));
    if (buf == NULL || received == NULL) {
        fprintf(stderr, "out of memory\n");
        MPI_Abort(MPI_COMM_WORLD, 1);
    }

    for (int phase = 0; phase < PHASES; phase++) {
        if (rank != 0) {
            int len = phase_len(phase, rank);
            buf[0] = rank;
            buf[1] = phase_tag(phase, rank);
            buf[2] = len;
            for (int i = 3; i < len; i++)
                buf[i] = rank * 1000 + phase * 100 + i;
            MPI_Send(buf, len, MPI_INT, 0, phase_tag(phase, rank), MPI_COMM_WORLD);
        } else {
            for (int k = 1; k < size; k++) {
                MPI_Status status;
                MPI_Request req;
                int count = -1;
                switch (phase) {
                case 0:
                    MPI_Recv(buf, cap, MPI_INT, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &status);
                    MPI_Get_count(&status, MPI_INT, &count);
                    break;
                case 1:
                    MPI_Irecv(buf, cap, MPI_INT, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &req);
                    MPI_Wait(&req, &status);
                    MPI_Get_count(&status, MPI_INT, &count);
                    break;
                case 2:
                    MPI_Irecv(buf, cap, MPI_INT, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &req);
                    MPI_Wait(&req, MPI_STATUS_IGNORE);
                    break;
                default:
                    MPI_Recv(buf, cap, MPI_INT, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                    break;
                }
                int sender = buf[0];
                if (sender < 1 || sender >= size)
                    fail("sender", phase, sender);
                if (buf[1] != phase_tag(phase, sender))
                    fail("tag", phase, sender);
                if (phase <= 1 && (status.MPI_SOURCE != sender || status.MPI_TAG != buf[1] || count != buf[2]))
                    fail("status", phase, sender);
                uint64_t hash = FOLD_SEED;
                for (int i = 0; i < buf[2]; i++)
                    hash = fold64(hash, (uint64_t)(uint32_t)buf[i]);
                uint64_t *slot = &received[((size_t)sender * PHASES + (size_t)phase) * 3];
                slot[0] = (uint64_t)buf[1];
                slot[1] = (uint64_t)buf[2];
                slot[2] = hash;
            }
        }
        if (phase + 1 < PHASES)
            MPI_Barrier(MPI_COMM_WORLD);
    }

    if (rank == 0) {
        printf("anysource ranks=%d\n", size);
        for (int s = 1; s < size; s++) {
            printf("from %d:", s);
            uint64_t hash = FOLD_SEED;
            for (int phase = 0; phase < PHASES; phase++) {
                const uint64_t *slot = &received[((size_t)s * PHASES + (size_t)phase) * 3];
                printf(" tag=%llu len=%llu", (unsigned long long)slot[0], (unsigned long long)slot[1]);
                hash = fold64(hash, slot[2]);
            }
            printf(" checksum=%016llx\n", (unsigned long long)hash);
        }
    }
    free(buf);
    free(received);
    MPI_Finalize();
    return 0;
}
