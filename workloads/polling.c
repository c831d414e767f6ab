/* Polling loops, counted by the program itself, so a test can check that folding the polls
 * that found nothing (format::PollRun) keeps the exact number of calls the program made.
 *
 *   polling [--rounds N] [--spin US]
 *
 * Each round, every rank posts an MPI_Irecv from its left neighbour and polls it with MPI_Test,
 * then probes for a second message with MPI_Iprobe, then polls two receives with MPI_Testsome.
 * Even ranks send each message only after spinning SPIN microseconds, so their right (odd)
 * neighbours poll in vain all that time; odd ranks send at once. Every poll is counted; each rank prints "rank R test T iprobe I testsome S". */
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
    long rounds = 20;
    double spin_us = 200;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--rounds"))
            rounds = atol(argv[i + 1]);
        else if (!strcmp(argv[i], "--spin"))
            spin_us = atof(argv[i + 1]);
    }
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int right = (rank + 1) % size, left = (rank + size - 1) % size;
    long tests = 0, iprobes = 0, testsomes = 0;
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
    }
    printf("rank %d test %ld iprobe %ld testsome %ld\n", rank, tests, iprobes, testsomes);
    MPI_Finalize();
    return 0;
}
