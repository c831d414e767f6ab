/* Polling loops, counted by the program itself, so a test can check that folding the polls
 * that found nothing (format::PollRun) keeps the exact number of calls the program made.
 *
 *   polling [--rounds N] [--spin US] [--overlap POLLS] [--overlap-work UNITS]
 *
 * Each round, every rank posts an MPI_Irecv from its left neighbour and polls it with MPI_Test,
 * then probes for a second message with MPI_Iprobe, then polls two receives with MPI_Testsome.
 * Even ranks send each message only after spinning SPIN microseconds, so their right (odd)
 * neighbours poll in vain all that time; odd ranks send at once. Every poll is counted; each rank
 * prints "rank R test T iprobe I testsome S".
 *
 * With --overlap, each round ends with a loop that computes and polls: POLLS times, UNITS of
 * register-only work and one MPI_Test of a receive whose message its sender sends only after its
 * own loop. No partner sets that loop's end: the program leaves it when its work is done (the
 * pattern of hpcc's RandomAccess), so the recorder's cost between the polls lengthens it. Those
 * polls are counted apart ("overlap O" at the end of the line). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void spin(double us)
{
    double until = MPI_Wtime() + us * 1e-6;
    while (MPI_Wtime() < until)
        ;
}

int main(int argc, char **argv)
{
    long rounds = 20, overlap = 0, overlap_work = 0;
    double spin_us = 200;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--rounds"))
            rounds = atol(argv[i + 1]);
        else if (!strcmp(argv[i], "--spin"))
            spin_us = atof(argv[i + 1]);
        else if (!strcmp(argv[i], "--overlap"))
            overlap = atol(argv[i + 1]);
        else if (!strcmp(argv[i], "--overlap-work"))
            overlap_work = atol(argv[i + 1]);
    }
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int right = (rank + 1) % size, left = (rank + size - 1) % size;
    long tests = 0, iprobes = 0, testsomes = 0, overlapped = 0;
    volatile double sink = 0;
    for (long r = 0; r < rounds; r++) {
        int got[3], mine = rank, flag = 0;
        MPI_Request recv, send[3], two[2];
        MPI_Irecv(&got[0], 1, MPI_INT, left, 1, MPI_COMM_WORLD, &recv);
        MPI_Barrier(MPI_COMM_WORLD);
        if (rank % 2 == 0)
            spin(spin_us);
        MPI_Isend(&mine, 1, MPI_INT, right, 1, MPI_COMM_WORLD, &send[0]);
        do {
            MPI_Test(&recv, &flag, MPI_STATUS_IGNORE);
            tests++;
        } while (!flag);

        MPI_Barrier(MPI_COMM_WORLD);
        if (rank % 2 == 0)
            spin(spin_us);
        MPI_Isend(&mine, 1, MPI_INT, right, 2, MPI_COMM_WORLD, &send[1]);
        flag = 0;
        do {
            MPI_Iprobe(left, 2, MPI_COMM_WORLD, &flag, MPI_STATUS_IGNORE);
            iprobes++;
        } while (!flag);
        MPI_Recv(&got[1], 1, MPI_INT, left, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE);

        MPI_Irecv(&got[2], 1, MPI_INT, left, 3, MPI_COMM_WORLD, &two[0]);
        two[1] = MPI_REQUEST_NULL;
        MPI_Barrier(MPI_COMM_WORLD);
        if (rank % 2 == 0)
            spin(spin_us);
        MPI_Isend(&mine, 1, MPI_INT, right, 3, MPI_COMM_WORLD, &send[2]);
        int outcount = 0, indices[2];
        MPI_Status statuses[3];
        do {
            MPI_Testsome(2, two, &outcount, indices, statuses);
            testsomes++;
        } while (outcount == 0);
        MPI_Waitall(3, send, statuses);

        if (overlap > 0) {
            int late = 0;
            MPI_Request late_recv, late_send;
            MPI_Irecv(&late, 1, MPI_INT, left, 4, MPI_COMM_WORLD, &late_recv);
            MPI_Barrier(MPI_COMM_WORLD);
            double x = 1.0 + rank;
            for (long k = 0; k < overlap; k++) {
                for (long u = 0; u < overlap_work; u++)
                    x = x * 1.0000001 + 1e-9;
                MPI_Test(&late_recv, &flag, MPI_STATUS_IGNORE);
                overlapped++;
            }
            sink += x;
            MPI_Isend(&mine, 1, MPI_INT, right, 4, MPI_COMM_WORLD, &late_send);
            MPI_Wait(&late_recv, MPI_STATUS_IGNORE);
            MPI_Wait(&late_send, MPI_STATUS_IGNORE);
        }
    }
    if (overlap > 0)
        printf("rank %d test %ld iprobe %ld testsome %ld overlap %ld\n", rank, tests, iprobes,
               testsomes, overlapped);
    else
        printf("rank %d test %ld iprobe %ld testsome %ld\n", rank, tests, iprobes, testsomes);
    MPI_Finalize();
    return 0;
}
