/* Smoke program for the recorder: a known number of calls of each kind, so the trace can be
 * checked for exact counts (tests/smoke.rs has the expected numbers). Runs with 2 ranks. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <mpi.h>
#include <stdio.h>
#include <string.h>

#define ITER 100
#define PERSIST 10

int main(int argc, char **argv)
{
    int provided, rank, size;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int other = (rank + 1) % size;
    int buf[64] = {0}, rbuf[64];
    double x = rank;
    void (*record)(const char *, const void *, size_t) =
        (void (*)(const char *, const void *, size_t))dlsym(RTLD_DEFAULT, "evenflush_record");
    void (*region_begin)(const char *) = (void (*)(const char *))dlsym(RTLD_DEFAULT, "evenflush_region_begin");
    void (*region_end)(const char *) = (void (*)(const char *))dlsym(RTLD_DEFAULT, "evenflush_region_end");

    if (region_begin) region_begin("main loop");
    for (int i = 0; i < ITER; i++) {
        if (rank == 0)
            MPI_Send(buf, 10, MPI_INT, 1, i, MPI_COMM_WORLD);
        else if (rank == 1)
            MPI_Recv(rbuf, 64, MPI_INT, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        MPI_Request reqs[2];
        MPI_Irecv(rbuf, 64, MPI_INT, MPI_ANY_SOURCE, 7, MPI_COMM_WORLD, &reqs[0]);
        MPI_Isend(buf, 3 + rank, MPI_INT, other, 7, MPI_COMM_WORLD, &reqs[1]);
        MPI_Waitall(2, reqs, MPI_STATUSES_IGNORE);
        MPI_Allreduce(MPI_IN_PLACE, &x, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    }
    if (region_end) region_end("main loop");
    MPI_Barrier(MPI_COMM_WORLD);

    MPI_Request p[2];
    MPI_Send_init(buf, 5, MPI_INT, other, 9, MPI_COMM_WORLD, &p[0]);
    MPI_Recv_init(rbuf, 64, MPI_INT, other, 9, MPI_COMM_WORLD, &p[1]);
    for (int i = 0; i < PERSIST; i++) {
        MPI_Startall(2, p);
        MPI_Waitall(2, p, MPI_STATUSES_IGNORE);
    }
    MPI_Request_free(&p[0]);
    MPI_Request_free(&p[1]);

    MPI_Comm sub, dup;
    MPI_Comm_split(MPI_COMM_WORLD, 0, -rank, &sub);
    MPI_Bcast(&x, 1, MPI_DOUBLE, 0, sub);
    MPI_Comm_free(&sub);
    MPI_Comm_dup(MPI_COMM_WORLD, &dup);
    MPI_Barrier(dup);
    MPI_Comm_free(&dup);
    if (record) record("answer", &x, sizeof x);
    MPI_Finalize();
    if (rank == 0) printf("smoke done (recorder %s)\n", record ? "present" : "absent");
    return 0;
}
