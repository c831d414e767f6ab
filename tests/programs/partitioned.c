/* Partitioned point-to-point (MPI-4, 2 ranks): every Pready form and Parrived on a request made
 * by Psend_init/Precv_init, started twice. tests/recorder.rs (partitioned) checks that each of
 * them names the request of its *_init. On an MPI without them it prints "no partitioned". */
#include <mpi.h>
#include <stdio.h>

#define PARTS 4
#define PER 8

int main(int argc, char **argv)
{
    int rank;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
#if MPI_VERSION >= 4
    int buf[PARTS * PER] = {0};
    MPI_Request req;
    if (rank == 0)
        MPI_Psend_init(buf, PARTS, (MPI_Count)PER, MPI_INT, 1, 7, MPI_COMM_WORLD, MPI_INFO_NULL, &req);
    else
        MPI_Precv_init(buf, PARTS, (MPI_Count)PER, MPI_INT, 0, 7, MPI_COMM_WORLD, MPI_INFO_NULL, &req);
    for (int round = 0; round < 2; round++) {
        MPI_Start(&req);
        if (rank == 0) {
            for (int i = 0; i < PARTS * PER; i++) buf[i] = round + i;
            /* One of each form: 1 + 1 + 1 calls per round. */
            MPI_Pready(0, req);
            MPI_Pready_range(1, 2, req);
            int last[1] = {PARTS - 1};
            MPI_Pready_list(1, last, req);
        } else {
            int arrived = 0;
            while (!arrived) MPI_Parrived(req, PARTS - 1, &arrived);
        }
        MPI_Wait(&req, MPI_STATUS_IGNORE);
    }
    MPI_Request_free(&req);
    if (rank == 1) printf("partitioned ok %d\n", buf[PARTS * PER - 1]);
#else
    if (rank == 0) printf("no partitioned\n");
#endif
    MPI_Finalize();
    return 0;
}
