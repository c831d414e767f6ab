/* A program that uses MPI only through a session (MPI-4): it never calls MPI_Init, so the
 * recorder must start at MPI_Session_init and end at the last MPI_Session_finalize. On an MPI
 * without sessions it prints "no sessions" and exits. */
#include <mpi.h>
#include <stdio.h>

int main(void)
{
#if MPI_VERSION >= 4
    MPI_Session session;
    MPI_Group group;
    MPI_Comm comm;
    MPI_Session_init(MPI_INFO_NULL, MPI_ERRORS_RETURN, &session);
    MPI_Group_from_session_pset(session, "mpi://WORLD", &group);
    MPI_Comm_create_from_group(group, "org.evenflush.test.sessions", MPI_INFO_NULL, MPI_ERRORS_RETURN, &comm);
    int rank, sum = 0, one = 1;
    MPI_Comm_rank(comm, &rank);
    /* 1 int = 4 bytes on a communicator of every process. */
    MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, comm);
    MPI_Barrier(comm);
    MPI_Comm_free(&comm);
    MPI_Group_free(&group);
    MPI_Session_finalize(&session);
    if (rank == 0) printf("sessions ok %d\n", sum);
#else
    printf("no sessions\n");
#endif
    return 0;
}
