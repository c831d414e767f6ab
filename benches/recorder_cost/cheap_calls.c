/* Recorder cost benchmark: cheap MPI calls in one process, timed inside the program (so MPI_Init
 * and the trace write at MPI_Finalize are excluded).
 *
 * Usage: cheap_calls [calls] [kind]    kind: rank | barrier | isend | waitall | subcomm | all
 *   rank     MPI_Comm_rank                                         (1 call per iteration)
 *   barrier  MPI_Barrier(MPI_COMM_SELF)                            (1)
 *   isend    MPI_Irecv + MPI_Isend to self, MPI_Wait on each       (4)
 *   waitall  13 MPI_Irecv + 13 MPI_Isend to self, one MPI_Waitall  (27: 26 requests)
 *   subcomm  MPI_Allreduce of one int on a communicator from MPI_Comm_split (1)
 *   poll     MPI_Test of a receive from self that nothing matches until the end (1): every
 *            call is a poll that finds nothing, which the recorder folds into one run (not
 *            in "all", whose kinds tests/recorder_cost.rs checks)
 * `calls` is the number of MPI calls per kind (rounded down to whole iterations).
 * Prints "<calls> <ns per call>" for one kind; for all, "<kind> <calls> <ns per call> <round>" per
 * kind, the kinds taking turns in 10 rounds and each reporting its fastest round and that round's
 * index, from 0 (tests/recorder_cost.rs compares the trace's stored cost in that same round). */
/* GCC mistakes MPICH's MPI_STATUSES_IGNORE for a zero-sized status array. */
#pragma GCC diagnostic ignored "-Wstringop-overflow"
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define PAIRS 13

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static int sink;

/* Runs `calls` calls of one kind; returns the number of calls made and sets *ns to the time. */
static long run(const char *kind, long calls, MPI_Comm sub, double *ns)
{
    int rank = 0, in = 1, out = 0;
    int sbuf[PAIRS], rbuf[PAIRS];
    MPI_Request reqs[2 * PAIRS];
    long made = 0;
    double t0 = now_ns();
    if (strcmp(kind, "rank") == 0) {
        for (; made < calls; made++) {
            MPI_Comm_rank(MPI_COMM_WORLD, &rank);
            sink += rank;
        }
    } else if (strcmp(kind, "barrier") == 0) {
        for (; made < calls; made++)
            MPI_Barrier(MPI_COMM_SELF);
    } else if (strcmp(kind, "isend") == 0) {
        for (; made + 4 <= calls; made += 4) {
            MPI_Irecv(rbuf, 1, MPI_INT, 0, 1, MPI_COMM_SELF, &reqs[0]);
            MPI_Isend(sbuf, 1, MPI_INT, 0, 1, MPI_COMM_SELF, &reqs[1]);
            MPI_Wait(&reqs[1], MPI_STATUS_IGNORE);
            MPI_Wait(&reqs[0], MPI_STATUS_IGNORE);
        }
    } else if (strcmp(kind, "waitall") == 0) {
        for (; made + 2 * PAIRS + 1 <= calls; made += 2 * PAIRS + 1) {
            for (int i = 0; i < PAIRS; i++)
                MPI_Irecv(&rbuf[i], 1, MPI_INT, 0, i, MPI_COMM_SELF, &reqs[i]);
            for (int i = 0; i < PAIRS; i++)
                MPI_Isend(&sbuf[i], 1, MPI_INT, 0, i, MPI_COMM_SELF, &reqs[PAIRS + i]);
            MPI_Waitall(2 * PAIRS, reqs, MPI_STATUSES_IGNORE);
        }
    } else if (strcmp(kind, "subcomm") == 0) {
        for (; made < calls; made++) {
            MPI_Allreduce(&in, &out, 1, MPI_INT, MPI_SUM, sub);
            sink += out;
        }
    } else if (strcmp(kind, "poll") == 0) {
        int flag = 0;
        MPI_Request late;
        MPI_Irecv(rbuf, 1, MPI_INT, 0, 99, MPI_COMM_SELF, &late);
        for (; made < calls; made++) {
            MPI_Test(&late, &flag, MPI_STATUS_IGNORE);
            sink += flag;
        }
        MPI_Isend(sbuf, 1, MPI_INT, 0, 99, MPI_COMM_SELF, &reqs[0]);
        MPI_Wait(&late, MPI_STATUS_IGNORE);
        MPI_Wait(&reqs[0], MPI_STATUS_IGNORE);
    } else {
        fprintf(stderr, "unknown kind %s\n", kind);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    *ns = now_ns() - t0;
    return made;
}

int main(int argc, char **argv)
{
    long calls = argc > 1 ? atol(argv[1]) : 10000000L;
    const char *kind = argc > 2 ? argv[2] : "rank";
    MPI_Init(&argc, &argv);
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm sub;
    MPI_Comm_split(MPI_COMM_WORLD, 0, rank, &sub);
    /* Warm up caches, page in the first trace block. */
    for (long i = 0; i < 1000; i++)
        MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    const char *kinds[] = {"rank", "barrier", "isend", "waitall", "subcomm"};
    double ns;
    if (strcmp(kind, "all") == 0) {
        /* The kinds take turns in ROUNDS rounds, and each reports its fastest round: a preemption,
         * or the page faults of a new trace block, lands in one round of one kind, and the
         * machine's slower and faster phases reach every kind alike. */
        enum { KINDS = sizeof kinds / sizeof kinds[0], ROUNDS = 10 };
        double best[KINDS];
        int best_round[KINDS] = {0};
        long made[KINDS] = {0};
        for (int k = 0; k < KINDS; k++)
            best[k] = 1e300;
        for (int round = 0; round < ROUNDS; round++) {
            for (int k = 0; k < KINDS; k++) {
                long n = run(kinds[k], calls / ROUNDS, sub, &ns);
                made[k] += n;
                if (ns / (double)n < best[k]) {
                    best[k] = ns / (double)n;
                    best_round[k] = round;
                }
            }
        }
        for (int k = 0; k < KINDS; k++)
            printf("%s %ld %.2f %d\n", kinds[k], made[k], best[k], best_round[k]);
    } else {
        long made = run(kind, calls, sub, &ns);
        printf("%ld %.2f\n", made, ns / (double)made);
    }
    MPI_Comm_free(&sub);
    MPI_Finalize();
    return sink == 12345 ? 1 : 0;
}
