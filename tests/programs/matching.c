/*
 * matching.c - the point-to-point and synchronisation families whose matching is least obvious,
 * on 4 ranks, each exchange deterministic, so that a reader of the trace knows exactly which send
 * each receive took (tests/reconstruct.rs: every message matched, no causality violation):
 *
 *   - persistent requests: Send_init/Recv_init, then MPI_Start and MPI_Startall (ring);
 *   - matched probes: MPI_Mprobe + MPI_Mrecv (ANY_SOURCE), MPI_Improbe + MPI_Imrecv + Wait, and
 *     both of MPI_PROC_NULL (MPI_MESSAGE_NO_PROC: no message);
 *   - large-count variants (MPI 4: MPI_Irecv_c + MPI_Send_c, MPI_Isend_c + MPI_Recv_c), where
 *     mpi.h declares them;
 *   - synchronous, buffered and ready sends (Ssend, Bsend, Rsend after a barrier);
 *   - a neighbourhood collective on a periodic 1-D Cartesian communicator;
 *   - RMA fences around a Put (the window's first fence opens the epoch, the second ends it);
 *   - point-to-point on an intercommunicator (even and odd world ranks), and collectives on it:
 *     Barrier, Allreduce, Bcast from the even group (MPI_ROOT / MPI_PROC_NULL there), Reduce to
 *     the odd group, Ibarrier + Wait;
 *   - the same intercommunicator duplicated (MPI_Comm_dup: no Intercomm_create names it), with a
 *     Sendrecv and an Allreduce on the copy.
 *
 * Usage: matching [--iterations N]  (default N = 20); P must be even (the Ssend ring alternates).
 * Messages per run, for P ranks (P even) and N iterations: persistent 2·P·N (each rank a Start
 * and a Startall round per iteration; 16 bytes each), probes 2·P·N (8 and 12 bytes),
 * Ssend/Bsend/Rsend 3·P·N, intercommunicator P·N, its copy P·N (4 bytes each): 9·P·N messages of
 * 72·P·N bytes; with large counts (L = 1, "large=1" in the output) 2·P·N more of 8 bytes each:
 * (9 + 2L)·P·N messages, (72 + 16L)·P·N bytes. Collective exits: per iteration P each for the world Barrier, the
 * neighbourhood collective, two fences, the five intercommunicator collectives and the copy's
 * Allreduce, and P for the final Reduce: 10·P·N + P.
 * stdout (rank 0): "matching ranks=P iterations=N sum=S large=L".
 */
#include <mpi.h>
#include "common.h"

/* MPICH 4 has the large-count functions; Open MPI 4.1 (MPI 3.1) has none. */
#if MPI_VERSION >= 4
#define LARGE_COUNT 1
#else
#define LARGE_COUNT 0
#endif

int main(int argc, char **argv)
{
    long iterations = flag_value(argc, argv, "--iterations", 20);
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int right = (rank + 1) % size, left = (rank + size - 1) % size;
    long sum = 0;
    int sbuf[4] = {rank, 1, 2, 3}, rbuf[4];

    MPI_Request pers[2];
    MPI_Send_init(sbuf, 4, MPI_INT, right, 11, MPI_COMM_WORLD, &pers[0]);
    MPI_Recv_init(rbuf, 4, MPI_INT, left, 11, MPI_COMM_WORLD, &pers[1]);

    int bsize = 16 * (int)(4 * sizeof(int) + MPI_BSEND_OVERHEAD);
    void *bbuf = malloc((size_t)bsize);
    MPI_Buffer_attach(bbuf, bsize);

    /* Odd and even world ranks, joined by an intercommunicator (leaders: world 0 and 1). */
    MPI_Comm half, inter;
    MPI_Comm_split(MPI_COMM_WORLD, rank % 2, rank, &half);
    MPI_Intercomm_create(half, 0, MPI_COMM_WORLD, rank % 2 == 0 ? 1 : 0, 99, &inter);
    int half_rank;
    MPI_Comm_rank(half, &half_rank);
    MPI_Comm inter_copy;
    MPI_Comm_dup(inter, &inter_copy);

    int dims[1] = {size}, periods[1] = {1};
    MPI_Comm cart;
    MPI_Cart_create(MPI_COMM_WORLD, 1, dims, periods, 0, &cart);

    int win_buf[4] = {0};
    MPI_Win win;
    MPI_Win_create(win_buf, sizeof win_buf, sizeof(int), MPI_INFO_NULL, MPI_COMM_WORLD, &win);

    for (long it = 0; it < iterations; it++) {
        /* Persistent: once with Start each, once with Startall. */
        MPI_Start(&pers[1]);
        MPI_Start(&pers[0]);
        MPI_Waitall(2, pers, MPI_STATUSES_IGNORE);
        sum += rbuf[0];
        MPI_Startall(2, pers);
        MPI_Waitall(2, pers, MPI_STATUSES_IGNORE);
        sum += rbuf[0];

        /* Matched probes: from the left with a wildcard source, then nonblocking. */
        MPI_Message msg;
        MPI_Status st;
        MPI_Send(sbuf, 2, MPI_INT, right, 12, MPI_COMM_WORLD);
        MPI_Mprobe(MPI_ANY_SOURCE, 12, MPI_COMM_WORLD, &msg, &st);
        MPI_Mrecv(rbuf, 2, MPI_INT, &msg, &st);
        sum += rbuf[0];
        MPI_Request r[2];
        MPI_Isend(sbuf, 3, MPI_INT, left, 13, MPI_COMM_WORLD, &r[0]);
        int flag = 0;
        while (!flag) MPI_Improbe(right, 13, MPI_COMM_WORLD, &flag, &msg, &st);
        MPI_Imrecv(rbuf, 3, MPI_INT, &msg, &r[1]);
        MPI_Waitall(2, r, MPI_STATUSES_IGNORE);
        sum += rbuf[0];
        /* A probe of MPI_PROC_NULL matches at once MPI_MESSAGE_NO_PROC, whose receive carries no
         * message: nothing to pair. */
        MPI_Mprobe(MPI_PROC_NULL, 12, MPI_COMM_WORLD, &msg, &st);
        MPI_Mrecv(rbuf, 2, MPI_INT, &msg, &st);
        flag = 0;
        MPI_Improbe(MPI_PROC_NULL, 13, MPI_COMM_WORLD, &flag, &msg, &st);
        MPI_Imrecv(rbuf, 3, MPI_INT, &msg, &r[1]);
        MPI_Wait(&r[1], MPI_STATUS_IGNORE);

#if LARGE_COUNT
        /* Large-count: to the right with a blocking send, to the left with a nonblocking one. */
        MPI_Irecv_c(rbuf, 2, MPI_INT, left, 19, MPI_COMM_WORLD, &r[0]);
        MPI_Send_c(sbuf, 2, MPI_INT, right, 19, MPI_COMM_WORLD);
        MPI_Wait(&r[0], MPI_STATUS_IGNORE);
        sum += rbuf[0];
        MPI_Isend_c(sbuf, 2, MPI_INT, left, 20, MPI_COMM_WORLD, &r[0]);
        MPI_Recv_c(rbuf, 2, MPI_INT, right, 20, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        MPI_Wait(&r[0], MPI_STATUS_IGNORE);
        sum += rbuf[0];
#endif

        /* Synchronous, buffered, ready (the receive is posted before the barrier). */
        if (rank % 2 == 0) {
            MPI_Ssend(sbuf, 1, MPI_INT, right, 14, MPI_COMM_WORLD);
            MPI_Recv(rbuf, 1, MPI_INT, left, 14, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else {
            MPI_Recv(rbuf, 1, MPI_INT, left, 14, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            MPI_Ssend(sbuf, 1, MPI_INT, right, 14, MPI_COMM_WORLD);
        }
        MPI_Bsend(sbuf, 1, MPI_INT, right, 15, MPI_COMM_WORLD);
        MPI_Recv(rbuf, 1, MPI_INT, left, 15, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        MPI_Irecv(rbuf, 1, MPI_INT, left, 16, MPI_COMM_WORLD, &r[0]);
        MPI_Barrier(MPI_COMM_WORLD);
        MPI_Rsend(sbuf, 1, MPI_INT, right, 16, MPI_COMM_WORLD);
        MPI_Wait(&r[0], MPI_STATUS_IGNORE);
        sum += rbuf[0];

        /* Neighbourhood collective on the ring. */
        int nb[2];
        MPI_Neighbor_allgather(&rank, 1, MPI_INT, nb, 1, MPI_INT, cart);
        sum += nb[0] + nb[1];

        /* RMA: put our rank into the right neighbour's window. */
        MPI_Win_fence(0, win);
        MPI_Put(&rank, 1, MPI_INT, right, 0, 1, MPI_INT, win);
        MPI_Win_fence(0, win);
        sum += win_buf[0];

        /* Intercommunicator: each rank sends to its counterpart in the other half. */
        int got;
        MPI_Sendrecv(&rank, 1, MPI_INT, half_rank, 17, &got, 1, MPI_INT, half_rank, 17, inter,
                     MPI_STATUS_IGNORE);
        sum += got;

        /* Collectives on the intercommunicator: the root's group passes MPI_ROOT at the root
         * and MPI_PROC_NULL elsewhere, the other group the root's rank in the remote group. */
        MPI_Barrier(inter);
        int mine = rank + 1, theirs = 0;
        MPI_Allreduce(&mine, &theirs, 1, MPI_INT, MPI_SUM, inter);
        sum += theirs;
        int value = rank % 2 == 0 ? (int)it : -1;
        int even_root = half_rank == 0 ? MPI_ROOT : MPI_PROC_NULL;
        MPI_Bcast(&value, 1, MPI_INT, rank % 2 == 0 ? even_root : 0, inter);
        sum += value;
        int odd_root = half_rank == 0 ? MPI_ROOT : MPI_PROC_NULL;
        int reduced = 0;
        MPI_Reduce(&mine, &reduced, 1, MPI_INT, MPI_SUM, rank % 2 == 1 ? odd_root : 0, inter);
        sum += reduced;
        MPI_Ibarrier(inter, &r[0]);
        MPI_Wait(&r[0], MPI_STATUS_IGNORE);

        /* The copy: the same pairs, another tag, and a collective. */
        MPI_Sendrecv(&rank, 1, MPI_INT, half_rank, 18, &got, 1, MPI_INT, half_rank, 18, inter_copy,
                     MPI_STATUS_IGNORE);
        sum += got;
        MPI_Allreduce(&mine, &theirs, 1, MPI_INT, MPI_SUM, inter_copy);
        sum += theirs;
    }

    MPI_Win_free(&win);
    MPI_Comm_free(&cart);
    MPI_Comm_free(&inter_copy);
    MPI_Comm_free(&inter);
    MPI_Comm_free(&half);
    MPI_Request_free(&pers[0]);
    MPI_Request_free(&pers[1]);
    MPI_Buffer_detach(&bbuf, &bsize);
    free(bbuf);
    long total = 0;
    MPI_Reduce(&sum, &total, 1, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0)
        printf("matching ranks=%d iterations=%ld sum=%ld large=%d\n", size, iterations, total,
               LARGE_COUNT);
    MPI_Finalize();
    return 0;
}
