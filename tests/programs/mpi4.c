/* One representative of each call class added with the MPI-4 coverage (2 ranks), where the MPI
 * has it: MPICH 4.0 has all of MPI-4 used here, Open MPI 4.1 only its MPIX_ persistent
 * collectives. tests/smoke.rs (mpi4) checks each call's name, communicator, peer and bytes. The
 * figures it expects are written next to each call. */
#include <mpi.h>
#ifdef OPEN_MPI
#include <mpi-ext.h>
#endif
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
    int rank;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    int other = 1 - rank;
    int a[16] = {0}, b[16] = {0};
    MPI_Request req;

#if MPI_VERSION >= 4
    /* Isendrecv: 4 ints = 16 bytes to `other`; Isendrecv_replace: 2 ints = 8 bytes. */
    MPI_Isendrecv(a, 4, MPI_INT, other, 1, b, 4, MPI_INT, other, 1, MPI_COMM_WORLD, &req);
    MPI_Wait(&req, MPI_STATUS_IGNORE);
    MPI_Isendrecv_replace(a, 2, MPI_INT, other, 2, other, 2, MPI_COMM_WORLD, &req);
    MPI_Wait(&req, MPI_STATUS_IGNORE);
    /* Large-count variants: Send_c/Recv_c 8 ints = 32 bytes; Allreduce_c 2 doubles = 16. */
    if (rank == 0)
        MPI_Send_c(a, (MPI_Count)8, MPI_INT, 1, 3, MPI_COMM_WORLD);
    else
        MPI_Recv_c(b, (MPI_Count)8, MPI_INT, 0, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    double d[2] = {1, 2}, e[2];
    MPI_Allreduce_c(d, e, (MPI_Count)2, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    /* Persistent collective: 1 int = 4 bytes, started twice. */
    MPI_Allreduce_init(a, b, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD, MPI_INFO_NULL, &req);
#elif defined(OMPI_HAVE_MPI_EXT_PCOLLREQ) && OMPI_HAVE_MPI_EXT_PCOLLREQ
    MPIX_Allreduce_init(a, b, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD, MPI_INFO_NULL, &req);
#else
    req = MPI_REQUEST_NULL;
#endif
    if (req != MPI_REQUEST_NULL) {
        for (int i = 0; i < 2; i++) {
            MPI_Start(&req);
            MPI_Wait(&req, MPI_STATUS_IGNORE);
        }
        MPI_Request_free(&req);
    }

#if MPI_VERSION >= 4
    /* Partitioned: 2 partitions of 4 ints = 32 bytes, rank 0 to rank 1. */
    if (rank == 0) {
        MPI_Psend_init(a, 2, (MPI_Count)4, MPI_INT, 1, 5, MPI_COMM_WORLD, MPI_INFO_NULL, &req);
        MPI_Start(&req);
        MPI_Pready(0, req);
        MPI_Pready(1, req);
    } else {
        MPI_Precv_init(b, 2, (MPI_Count)4, MPI_INT, 0, 5, MPI_COMM_WORLD, MPI_INFO_NULL, &req);
        MPI_Start(&req);
        int arrived = 0;
        while (!arrived) MPI_Parrived(req, 1, &arrived);
    }
    MPI_Wait(&req, MPI_STATUS_IGNORE);
    MPI_Request_free(&req);
#endif

    /* Matched probe on a duplicate: Mrecv's communicator comes from the message handle. */
    MPI_Comm dup, idup;
    MPI_Comm_dup(MPI_COMM_WORLD, &dup);
    if (rank == 0) {
        MPI_Send(a, 3, MPI_INT, 1, 6, dup);
    } else {
        MPI_Message msg;
        MPI_Mprobe(0, 6, dup, &msg, MPI_STATUS_IGNORE);
        MPI_Mrecv(b, 3, MPI_INT, &msg, MPI_STATUS_IGNORE);
    }
    /* Comm_idup: defined at the call, used after the wait. */
    MPI_Comm_idup(MPI_COMM_WORLD, &idup, &req);
    MPI_Wait(&req, MPI_STATUS_IGNORE);
    MPI_Barrier(idup);

    /* Intercommunicator between the two ranks: its remote group is the other rank. */
    MPI_Comm half, inter;
    MPI_Comm_split(MPI_COMM_WORLD, rank, 0, &half);
    MPI_Intercomm_create(half, 0, MPI_COMM_WORLD, other, 7, &inter);
    if (rank == 0)
        MPI_Send(a, 1, MPI_INT, 0, 8, inter);
    else
        MPI_Recv(b, 1, MPI_INT, 0, 8, inter, MPI_STATUS_IGNORE);

    /* One-sided: request-based accumulates (2 ints = 8 bytes to `other`), flush_local_all, shared
     * and dynamic windows. */
    int *base;
    MPI_Win win, shared, dynamic;
    MPI_Win_allocate(16 * sizeof(int), sizeof(int), MPI_INFO_NULL, MPI_COMM_WORLD, &base, &win);
    MPI_Win_lock_all(0, win);
    MPI_Raccumulate(a, 2, MPI_INT, other, 0, 2, MPI_INT, MPI_SUM, win, &req);
    MPI_Wait(&req, MPI_STATUS_IGNORE);
    MPI_Rget_accumulate(a, 2, MPI_INT, b, 2, MPI_INT, other, 4, 2, MPI_INT, MPI_SUM, win, &req);
    MPI_Wait(&req, MPI_STATUS_IGNORE);
    MPI_Win_flush_local_all(win);
    MPI_Win_unlock_all(win);
    MPI_Win_free(&win);
    int *sbase;
    MPI_Win_allocate_shared(4 * sizeof(int), sizeof(int), MPI_INFO_NULL, MPI_COMM_WORLD, &sbase, &shared);
    MPI_Win_fence(0, shared);
    MPI_Win_free(&shared);
    MPI_Win_create_dynamic(MPI_INFO_NULL, MPI_COMM_WORLD, &dynamic);
    MPI_Win_free(&dynamic);

    /* Nonblocking and split-collective MPI-IO: 4 ints = 16 bytes each. */
    char path[4096];
    const char *tmp = getenv("TMPDIR");
    snprintf(path, sizeof path, "%s/evenflush-mpi4.dat", tmp ? tmp : "/tmp");
    MPI_File fh;
    MPI_File_open(MPI_COMM_WORLD, path, MPI_MODE_CREATE | MPI_MODE_RDWR, MPI_INFO_NULL, &fh);
    MPI_File_iwrite_at_all(fh, (MPI_Offset)(rank * 16), a, 4, MPI_INT, &req);
    MPI_Wait(&req, MPI_STATUS_IGNORE);
    MPI_File_write_at_all_begin(fh, (MPI_Offset)(32 + rank * 16), a, 4, MPI_INT);
    MPI_File_write_at_all_end(fh, a, MPI_STATUS_IGNORE);
    MPI_File_close(&fh);
    if (rank == 0) MPI_File_delete(path, MPI_INFO_NULL);

    MPI_Pcontrol(2);
    MPI_Comm_free(&inter);
    MPI_Comm_free(&half);
    MPI_Comm_free(&idup);
    MPI_Comm_free(&dup);
    if (rank == 0) printf("mpi4 ok\n");
    MPI_Finalize();
    return 0;
}
