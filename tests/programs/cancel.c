/* Cancelled requests are recorded as cancelled, others not (tests/smoke.rs cancel).
 * One rank, in order:
 *   1. Irecv + Isend to self (tag 1), Waitall: two completions, nothing cancelled (the program has
 *      not called MPI_Cancel yet);
 *   2. Irecv of tag 99, which nobody sends; MPI_Cancel; MPI_Wait: cancelled;
 *   3. Irecv + Isend to self (tag 2), Waitall: not cancelled.
 * Prints "cancel ok" when MPI itself agrees with each step. */
#include <mpi.h>
#include <stdio.h>

static int exchange(int tag)
{
    int out = tag, in = -1;
    MPI_Request r[2];
    MPI_Status st[2];
    MPI_Irecv(&in, 1, MPI_INT, 0, tag, MPI_COMM_WORLD, &r[0]);
    MPI_Isend(&out, 1, MPI_INT, 0, tag, MPI_COMM_WORLD, &r[1]);
    MPI_Waitall(2, r, st);
    int cancelled = 1;
    MPI_Test_cancelled(&st[0], &cancelled);
    return in == tag && !cancelled;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int ok = exchange(1);
    int never = 0;
    MPI_Request r;
    MPI_Status st;
    MPI_Irecv(&never, 1, MPI_INT, 0, 99, MPI_COMM_WORLD, &r);
    MPI_Cancel(&r);
    MPI_Wait(&r, &st);
    int cancelled = 0;
    MPI_Test_cancelled(&st, &cancelled);
    ok = ok && cancelled;
    ok = ok && exchange(2);
    printf("cancel %s\n", ok ? "ok" : "FAILED");
    MPI_Finalize();
    return ok ? 0 : 1;
}
