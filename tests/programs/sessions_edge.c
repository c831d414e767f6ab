/* Sessions edge cases (MPI-4), by the first argument (tests/smoke.rs sessions_edge):
 *   overlap: a session, then the world model while it is open; the session ends before
 *            MPI_Finalize, and a Barrier on MPI_COMM_WORLD follows it;
 *   world-first: the same, but MPI_Finalize comes first and the session is used after it;
 *   after:   a session opened and finalized, then MPI_Init ... MPI_Finalize (MPICH 4.0.2 itself
 *            crashes in that MPI_Init, so no test runs it);
 *   uneven:  sessions only, rank r opens r+1 sessions (at most 8), one Allreduce on the first.
 * On an MPI without sessions it prints "no sessions". */
#include <mpi.h>
#include <stdio.h>
#include <string.h>

#if MPI_VERSION >= 4
/* One Allreduce of 1 int over a communicator made from the session's world group. */
static int session_sum(MPI_Session s, const char *tag)
{
    MPI_Group group;
    MPI_Comm comm;
    int one = 1, sum = 0;
    MPI_Group_from_session_pset(s, "mpi://WORLD", &group);
    MPI_Comm_create_from_group(group, tag, MPI_INFO_NULL, MPI_ERRORS_RETURN, &comm);
    MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, comm);
    MPI_Comm_free(&comm);
    MPI_Group_free(&group);
    return sum;
}
#endif

int main(int argc, char **argv)
{
#if MPI_VERSION >= 4
    const char *mode = argc > 1 ? argv[1] : "after";
    if (strcmp(mode, "world-first") == 0) {
        MPI_Session s;
        MPI_Session_init(MPI_INFO_NULL, MPI_ERRORS_RETURN, &s);
        MPI_Init(&argc, &argv);
        int rank, world = 0, one = 1;
        MPI_Comm_rank(MPI_COMM_WORLD, &rank);
        MPI_Allreduce(&one, &world, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
        MPI_Finalize();
        int sum = session_sum(s, "org.evenflush.test.after");
        MPI_Session_finalize(&s);
        if (rank == 0) printf("sessions world-first ok %d %d\n", sum, world);
    } else if (strcmp(mode, "overlap") == 0) {
        MPI_Session s;
        MPI_Session_init(MPI_INFO_NULL, MPI_ERRORS_RETURN, &s);
        int sum = session_sum(s, "org.evenflush.test.before");
        MPI_Init(&argc, &argv);
        int rank, world = 0, one = 1;
        MPI_Comm_rank(MPI_COMM_WORLD, &rank);
        MPI_Allreduce(&one, &world, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
        MPI_Session_finalize(&s);
        MPI_Barrier(MPI_COMM_WORLD);
        MPI_Finalize();
        if (rank == 0) printf("sessions overlap ok %d %d\n", sum, world);
    } else if (strcmp(mode, "after") == 0) {
        MPI_Session s;
        MPI_Session_init(MPI_INFO_NULL, MPI_ERRORS_RETURN, &s);
        int sum = session_sum(s, "org.evenflush.test.before");
        MPI_Session_finalize(&s);
        MPI_Init(&argc, &argv);
        int rank, world = 0, one = 1;
        MPI_Comm_rank(MPI_COMM_WORLD, &rank);
        MPI_Allreduce(&one, &world, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
        MPI_Finalize();
        if (rank == 0) printf("sessions after ok %d %d\n", sum, world);
    } else {
        MPI_Session s[8];
        MPI_Session_init(MPI_INFO_NULL, MPI_ERRORS_RETURN, &s[0]);
        MPI_Group g;
        int rank;
        MPI_Group_from_session_pset(s[0], "mpi://WORLD", &g);
        MPI_Group_rank(g, &rank);
        MPI_Group_free(&g);
        int n = rank + 1 < 8 ? rank + 1 : 8;
        for (int i = 1; i < n; i++) MPI_Session_init(MPI_INFO_NULL, MPI_ERRORS_RETURN, &s[i]);
        /* Collectives only on the first session: the others are opened and closed alone. */
        int sum = session_sum(s[0], "org.evenflush.test.uneven");
        for (int i = n - 1; i >= 0; i--) MPI_Session_finalize(&s[i]);
        if (rank == 0) printf("sessions uneven ok %d\n", sum);
    }
#else
    (void)argc;
    (void)argv;
    printf("no sessions\n");
#endif
    return 0;
}
