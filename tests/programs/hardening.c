/*
 * hardening.c - what a production job may do to the recorder around it
 * (tests/hardening.rs). Usage: hardening <mode> [n] [m]   (n, m default 100)
 *
 * Every mode calls MPI_Barrier on MPI_COMM_SELF n times, does what its name
 * says, then (if it survives) m more times, and MPI_Finalize. Barriers on
 * MPI_COMM_SELF, so a rank that dies leaves no other rank waiting.
 *
 *   plain          nothing in between (for the disk-fault tests).
 *   term-default   raise(SIGTERM) with the default action: the rank dies of it.
 *   term-flood     a second thread (no MPI) sends SIGTERM to the main thread
 *                  after 300 ms, while the main thread calls MPI_Comm_rank in a
 *                  loop; run with a small --limit, the recorder is then nearly
 *                  always writing (holding its sink's lock) when the signal lands.
 *   abort          MPI_Abort(MPI_COMM_WORLD, 3).
 *   term-before    own SIGTERM handler installed before MPI_Init; raise(SIGTERM);
 *                  the handler prints "rank R: handler called" and the job goes on.
 *   term-after     the same with the handler installed after MPI_Init.
 *   term-exit      own SIGTERM handler installed before MPI_Init that calls
 *                  exit(0) (without MPI_Finalize); raise(SIGTERM).
 *   int-ignored    SIGINT set to SIG_IGN before MPI_Init (as a background job's
 *                  shell does); raise(SIGINT); the job goes on.
 *   segv           writes through a null pointer: the rank crashes.
 *   fork           fork(); the child calls exit(0) at once (atexit handlers run
 *                  in it); the parent waits for it, prints whether its .reserve
 *                  file in $EVENFLUSH_OUT is still there, and goes on.
 *   spawn          MPI_Comm_spawn of one process running "hardening spawned":
 *                  that child makes n Barriers on its MPI_COMM_WORLD and m on
 *                  MPI_COMM_SELF; the parents make n + m on MPI_COMM_SELF;
 *                  both sides disconnect the intercommunicator.
 *   attr-free      Comm_free inside an attribute delete callback (as PETSc does):
 *                  comm B (a dup of MPI_COMM_WORLD) gets one Barrier, then is
 *                  freed from the delete callback of an attribute on comm A when
 *                  A is freed; new dups are made until one reuses B's handle
 *                  (at most 64; prints "reused=1" or "reused=0") and that one
 *                  gets 2 Barriers. Then n + m Barriers on MPI_COMM_SELF.
 *
 * Exact calls per rank, when the mode survives: MPI_Init 1, MPI_Comm_rank 1,
 * MPI_Barrier n + m (attr-free: + 3), MPI_Finalize 1.
 */
#define _GNU_SOURCE
#include <mpi.h>
#include <pthread.h>
#include <signal.h>
#include <time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static volatile sig_atomic_t got_signal;

static void on_term(int sig)
{
    (void)sig;
    got_signal = 1;
}

static void exit_on_term(int sig)
{
    (void)sig;
    exit(0);
}

static void install_term_handler(void (*handler)(int))
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = handler;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
}

static void barriers(long n)
{
    for (long i = 0; i < n; i++) MPI_Barrier(MPI_COMM_SELF);
}

static pthread_t main_thread;

static void *terminator(void *arg)
{
    (void)arg;
    struct timespec pause = {0, 300000000L};
    nanosleep(&pause, NULL);
    pthread_kill(main_thread, SIGTERM);
    return NULL;
}

static MPI_Comm victim = MPI_COMM_NULL;

static int free_victim(MPI_Comm comm, int keyval, void *value, void *extra)
{
    (void)comm;
    (void)keyval;
    (void)value;
    (void)extra;
    return MPI_Comm_free(&victim);
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "term-default";
    long n = argc > 2 ? atol(argv[2]) : 100;
    long m = argc > 3 ? atol(argv[3]) : 100;
    if (strcmp(mode, "term-before") == 0) install_term_handler(on_term);
    if (strcmp(mode, "term-exit") == 0) install_term_handler(exit_on_term);
    if (strcmp(mode, "int-ignored") == 0) signal(SIGINT, SIG_IGN);
    MPI_Init(&argc, &argv);
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (strcmp(mode, "term-after") == 0) install_term_handler(on_term);

    if (strcmp(mode, "spawned") == 0) {
        MPI_Comm parent;
        MPI_Comm_get_parent(&parent);
        for (long i = 0; i < n; i++) MPI_Barrier(MPI_COMM_WORLD);
        barriers(m);
        MPI_Comm_disconnect(&parent);
        MPI_Finalize();
        return 0;
    }

    if (strcmp(mode, "attr-free") == 0) {
        MPI_Comm holder;
        MPI_Comm_dup(MPI_COMM_WORLD, &victim);
        MPI_Barrier(victim);
        MPI_Comm freed = victim;
        MPI_Comm_dup(MPI_COMM_WORLD, &holder);
        int keyval;
        MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, free_victim, &keyval, NULL);
        MPI_Comm_set_attr(holder, keyval, NULL);
        MPI_Comm_free(&holder); /* frees victim from inside MPI_Comm_free */
        MPI_Comm_free_keyval(&keyval);
        MPI_Comm tries[64];
        int ntries = 0, reused = 0;
        while (ntries < 64) {
            MPI_Comm_dup(MPI_COMM_WORLD, &tries[ntries]);
            if (tries[ntries++] == freed) {
                reused = 1;
                break;
            }
        }
        MPI_Barrier(tries[ntries - 1]);
        MPI_Barrier(tries[ntries - 1]);
        for (int i = 0; i < ntries; i++) MPI_Comm_free(&tries[i]);
        printf("rank %d: reused=%d\n", rank, reused);
        fflush(stdout);
        barriers(n + m);
        MPI_Finalize();
        return 0;
    }

    barriers(n);
    if (strcmp(mode, "term-default") == 0) {
        raise(SIGTERM);
        /* The recorder writes the trace on another thread, then the signal ends the process. */
        for (;;) barriers(1);
    } else if (strcmp(mode, "term-exit") == 0) {
        raise(SIGTERM);
        printf("rank %d: still running after the handler\n", rank);
    } else if (strcmp(mode, "term-flood") == 0) {
        pthread_t t;
        main_thread = pthread_self();
        pthread_create(&t, NULL, terminator, NULL);
        int r;
        for (;;) MPI_Comm_rank(MPI_COMM_WORLD, &r);
    } else if (strcmp(mode, "abort") == 0) {
        MPI_Abort(MPI_COMM_WORLD, 3);
    } else if (strcmp(mode, "term-before") == 0 || strcmp(mode, "term-after") == 0) {
        raise(SIGTERM);
        if (got_signal) printf("rank %d: handler called\n", rank);
        fflush(stdout);
    } else if (strcmp(mode, "int-ignored") == 0) {
        raise(SIGINT);
        printf("rank %d: survived SIGINT\n", rank);
        fflush(stdout);
    } else if (strcmp(mode, "segv") == 0) {
        volatile int *nowhere = NULL;
        *nowhere = 1;
    } else if (strcmp(mode, "fork") == 0) {
        pid_t child = fork();
        if (child == 0) exit(0);
        int status = 0;
        waitpid(child, &status, 0);
        const char *out = getenv("EVENFLUSH_OUT");
        char reserve[4096];
        snprintf(reserve, sizeof reserve, "%s/.rank-%05d.reserve", out ? out : ".", rank);
        printf("rank %d: child exited %d, reserve %s\n", rank, WIFEXITED(status) ? WEXITSTATUS(status) : -1,
               access(reserve, F_OK) == 0 ? "intact" : "missing");
        fflush(stdout);
    } else if (strcmp(mode, "spawn") == 0) {
        MPI_Comm children;
        char *child_argv[] = {"spawned", argc > 2 ? argv[2] : "100", argc > 3 ? argv[3] : "100", NULL};
        MPI_Comm_spawn(argv[0], child_argv, 1, MPI_INFO_NULL, 0, MPI_COMM_WORLD, &children, MPI_ERRCODES_IGNORE);
        MPI_Comm_disconnect(&children);
    }
    barriers(m);
    MPI_Finalize();
    return 0;
}
