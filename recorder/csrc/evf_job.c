/* The few MPI calls `evenflush reconstruct` makes when it runs as an MPI job itself: byte messages
 * over MPI_COMM_WORLD. They live here, compiled against each MPI's own mpi.h, because the evenflush
 * binary links no MPI: Open MPI's and MPICH's handles, constants and status layouts differ, so
 * the binary loads this library for the MPI that launched it and sees only plain integers.
 *
 * Every function calls PMPI_* directly: this library also holds the recorder's MPI_* wrappers,
 * and the reconstructing process must not record itself. Each returns an MPI error code
 * (MPI_SUCCESS = 0); the communicator returns errors instead of aborting, so the caller can say
 * what failed. */
#include <limits.h>
#include <mpi.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#define EVF_JOB_EXPORT __attribute__((visibility("default")))

EVF_JOB_EXPORT int evenflush_job_init(int *rank, int *size) {
    int provided = 0;
    int rc = PMPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided);
    if (rc != MPI_SUCCESS) return rc;
    PMPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    rc = PMPI_Comm_rank(MPI_COMM_WORLD, rank);
    if (rc != MPI_SUCCESS) return rc;
    return PMPI_Comm_size(MPI_COMM_WORLD, size);
}

EVF_JOB_EXPORT int evenflush_job_send(int dest, int tag, const void *buf, uint64_t len) {
    if (len > (uint64_t)INT_MAX) return MPI_ERR_COUNT;
    return PMPI_Send(buf, (int)len, MPI_BYTE, dest, tag, MPI_COMM_WORLD);
}

/* Starts a send that completes later: *request receives a handle for evenflush_job_poll_send,
 * which owns it until the send completed. `buf` must stay untouched until then. */
EVF_JOB_EXPORT int evenflush_job_isend(int dest, int tag, const void *buf, uint64_t len,
                                       uint64_t *request) {
    if (len > (uint64_t)INT_MAX) return MPI_ERR_COUNT;
    MPI_Request *r = malloc(sizeof *r);
    if (r == NULL) return MPI_ERR_NO_MEM;
    int rc = PMPI_Isend(buf, (int)len, MPI_BYTE, dest, tag, MPI_COMM_WORLD, r);
    if (rc != MPI_SUCCESS) {
        free(r);
        return rc;
    }
    *request = (uint64_t)(uintptr_t)r;
    return MPI_SUCCESS;
}

/* Whether the send of `request` completed (then the handle is released). Never waits: the caller
 * polls, yielding its core between looks (MPI's own waits poll without yielding). */
EVF_JOB_EXPORT int evenflush_job_poll_send(uint64_t request, int *done) {
    MPI_Request *r = (MPI_Request *)(uintptr_t)request;
    int rc = PMPI_Test(r, done, MPI_STATUS_IGNORE);
    if (rc == MPI_SUCCESS && *done) free(r);
    return rc;
}

/* Whether a message from `source` (-1: any) with any tag has arrived (*found), and if so who
 * sent it, its tag and its length; `evenflush_job_recv` then takes it. */
EVF_JOB_EXPORT int evenflush_job_iprobe(int source, int *found, int *from, int *tag, uint64_t *len) {
    MPI_Status status;
    int rc = PMPI_Iprobe(source < 0 ? MPI_ANY_SOURCE : source, MPI_ANY_TAG, MPI_COMM_WORLD, found,
                         &status);
    if (rc != MPI_SUCCESS || !*found) return rc;
    int count = 0;
    rc = PMPI_Get_count(&status, MPI_BYTE, &count);
    if (rc != MPI_SUCCESS) return rc;
    *from = status.MPI_SOURCE;
    *tag = status.MPI_TAG;
    *len = (uint64_t)count;
    return MPI_SUCCESS;
}

EVF_JOB_EXPORT int evenflush_job_recv(int source, int tag, void *buf, uint64_t len) {
    if (len > (uint64_t)INT_MAX) return MPI_ERR_COUNT;
    return PMPI_Recv(buf, (int)len, MPI_BYTE, source, tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
}

/* The MPI's own words for an error code. */
EVF_JOB_EXPORT void evenflush_job_error_string(int code, char *text, int capacity) {
    char message[MPI_MAX_ERROR_STRING];
    int n = 0;
    if (PMPI_Error_string(code, message, &n) != MPI_SUCCESS) n = 0;
    if (capacity <= 0) return;
    if (n > capacity - 1) n = capacity - 1;
    for (int i = 0; i < n; i++) text[i] = message[i];
    text[n] = '\0';
}

EVF_JOB_EXPORT int evenflush_job_finalize(void) { return PMPI_Finalize(); }

EVF_JOB_EXPORT void evenflush_job_abort(int code) { PMPI_Abort(MPI_COMM_WORLD, code); }
