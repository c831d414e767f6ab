/* The recorder's own MPI traffic, handed to the Rust core as one table (evf_transport_t): the
 * offload protocol's collectives on the private communicator evf_tr_comm, the MPI-IO trace writer,
 * and the group files of the aggregated layout. None of it is recorded. */
#include "evf_runtime.h"

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

/* ---------------- private transport on a duplicate of MPI_COMM_WORLD ---------------- */

static int evf_tr_barrier(void) { return PMPI_Barrier(evf_tr_comm); }

static int evf_tr_allreduce_or(int value, int *result)
{
    return PMPI_Allreduce(&value, result, 1, MPI_INT, MPI_LOR, evf_tr_comm);
}

static int evf_tr_reduce_f64(double value, int max, double *result_at_root)
{
    return PMPI_Reduce(&value, result_at_root, 1, MPI_DOUBLE, max ? MPI_MAX : MPI_MIN, 0, evf_tr_comm);
}

/* The split decision's reduction: started at one decision point, completed at the next. Its
 * buffers must outlive the call that starts it, hence statics (one outstanding at a time, taken
 * under the protocol's lock). */
static MPI_Request evf_decision_request = MPI_REQUEST_NULL;
static uint64_t evf_decision_word, evf_decision_result;

static int evf_tr_decision_start(uint64_t word)
{
    evf_decision_word = word;
    return PMPI_Iallreduce(&evf_decision_word, &evf_decision_result, 1, MPI_UINT64_T, MPI_BOR, evf_tr_comm,
                           &evf_decision_request);
}

static int evf_tr_decision_finish(uint64_t *result)
{
    int rc = PMPI_Wait(&evf_decision_request, MPI_STATUS_IGNORE);
    *result = evf_decision_result;
    return rc;
}

static int evf_tr_bcast_f64(double *value, int root) { return PMPI_Bcast(value, 1, MPI_DOUBLE, root, evf_tr_comm); }

static int evf_tr_bcast_u64(uint64_t *value, int root)
{
    return PMPI_Bcast(value, 1, MPI_UINT64_T, root, evf_tr_comm);
}

static int evf_tr_send_f64(double value, int dest, int tag)
{
    return PMPI_Send(&value, 1, MPI_DOUBLE, dest, tag, evf_tr_comm);
}

static int evf_tr_recv_f64(double *value, int source, int tag)
{
    return PMPI_Recv(value, 1, MPI_DOUBLE, source, tag, evf_tr_comm, MPI_STATUS_IGNORE);
}

static int evf_tr_send_u64(uint64_t value, int dest, int tag)
{
    return PMPI_Send(&value, 1, MPI_UINT64_T, dest, tag, evf_tr_comm);
}

static int evf_tr_recv_u64(uint64_t *value, int source, int tag)
{
    return PMPI_Recv(value, 1, MPI_UINT64_T, source, tag, evf_tr_comm, MPI_STATUS_IGNORE);
}

/* Whether a request handle may name several live requests at once (see recorder/src/front/requests.rs):
 * MPICH hands out preallocated "builtin" requests (handle kind bits 01) for operations that are
 * complete at once, many times over; Open MPI hands out its static ompi_request_empty (e.g. for
 * MPI_PROC_NULL). Any other handle names one live request, so a table entry found under it at
 * creation is stale (freed where the recorder did not see it). */
static int evf_request_shared(uint64_t h)
{
#ifdef OPEN_MPI
    static void *empty;
    static int looked;
    if (!looked) {
        empty = dlsym(RTLD_DEFAULT, "ompi_request_empty");
        looked = 1;
    }
    return empty == NULL || h == (uint64_t)(uintptr_t)empty;
#else
    return ((h >> 30) & 3u) == 1u;
#endif
}

/* ---------------- MPI-IO trace writer ---------------- */

static MPI_File evf_trace_file = MPI_FILE_NULL;

static int evf_error_class(int rc)
{
    int cls = rc;
    if (rc != MPI_SUCCESS) PMPI_Error_class(rc, &cls);
    return cls;
}

static int evf_file_open(const char *path)
{
    if (evf_trace_file != MPI_FILE_NULL) PMPI_File_close(&evf_trace_file);
    if (evf_self_comm == MPI_COMM_NULL) return MPI_ERR_COMM;
    /* A failed open reports through MPI_FILE_NULL's error handler, which the application may have
     * made fatal: a full disk must come back as an error class, not end the job. */
    MPI_Errhandler app_default = MPI_ERRHANDLER_NULL;
    int have_default = PMPI_File_get_errhandler(MPI_FILE_NULL, &app_default) == MPI_SUCCESS;
    if (have_default) PMPI_File_set_errhandler(MPI_FILE_NULL, MPI_ERRORS_RETURN);
    int rc = PMPI_File_open(evf_self_comm, path, MPI_MODE_WRONLY | MPI_MODE_CREATE, MPI_INFO_NULL,
                            &evf_trace_file);
    if (have_default) {
        PMPI_File_set_errhandler(MPI_FILE_NULL, app_default);
        PMPI_Errhandler_free(&app_default);
    }
    if (rc != MPI_SUCCESS) return evf_error_class(rc);
    /* The file inherited that handler too. */
    PMPI_File_set_errhandler(evf_trace_file, MPI_ERRORS_RETURN);
    /* A file left by an earlier run under the same name must not keep a stale tail. */
    return evf_error_class(PMPI_File_set_size(evf_trace_file, 0));
}

static int evf_file_write_at(uint64_t offset, const void *data, uint64_t len)
{
    const char *p = (const char *)data;
    while (len > 0) {
        int n = len > (1u << 30) ? (1 << 30) : (int)len;
        MPI_Status st;
        int rc = PMPI_File_write_at(evf_trace_file, (MPI_Offset)offset, p, n, MPI_BYTE, &st);
        if (rc != MPI_SUCCESS) return evf_error_class(rc);
        int written = 0;
        PMPI_Get_count(&st, MPI_BYTE, &written);
        if (written <= 0) return MPI_ERR_IO;
        p += written;
        offset += (uint64_t)written;
        len -= (uint64_t)written;
    }
    return MPI_SUCCESS;
}

static int evf_file_set_size(uint64_t size)
{
    return evf_error_class(PMPI_File_set_size(evf_trace_file, (MPI_Offset)size));
}

static int evf_file_sync(void) { return evf_error_class(PMPI_File_sync(evf_trace_file)); }

static int evf_file_close(void)
{
    if (evf_trace_file == MPI_FILE_NULL) return MPI_SUCCESS;
    return evf_error_class(PMPI_File_close(&evf_trace_file));
}

/* ---------------- Group files (aggregated layout) ---------------- */

static MPI_Comm evf_group_comm = MPI_COMM_NULL;
static MPI_File evf_group_file = MPI_FILE_NULL;

/* The worst error class any member saw: every member then takes the same branch. */
static int evf_group_agree(int cls)
{
    int worst = cls;
    if (PMPI_Allreduce(&cls, &worst, 1, MPI_INT, MPI_MAX, evf_group_comm) != MPI_SUCCESS) return MPI_ERR_OTHER;
    return worst;
}

static int evf_group_setup(int per_node, int *group_rank, int *group_size, int *leader_world_rank)
{
    if (evf_tr_comm == MPI_COMM_NULL) return MPI_ERR_COMM;
    int rc = per_node ? PMPI_Comm_split_type(evf_tr_comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &evf_group_comm)
                      : PMPI_Comm_dup(evf_tr_comm, &evf_group_comm);
    /* Every rank must know if any failed, or some would go on to open the file collectively
     * while others never do. */
    int cls = evf_error_class(rc), worst = cls;
    if (PMPI_Allreduce(&cls, &worst, 1, MPI_INT, MPI_MAX, evf_tr_comm) != MPI_SUCCESS) worst = MPI_ERR_OTHER;
    if (worst != MPI_SUCCESS) {
        if (evf_group_comm != MPI_COMM_NULL) PMPI_Comm_free(&evf_group_comm);
        return worst;
    }
    PMPI_Comm_set_errhandler(evf_group_comm, MPI_ERRORS_RETURN);
    PMPI_Comm_rank(evf_group_comm, group_rank);
    PMPI_Comm_size(evf_group_comm, group_size);
    int world_rank = 0;
    PMPI_Comm_rank(evf_tr_comm, &world_rank);
    /* Split keeps the parent's order, so member 0 has the lowest world rank: it names the file. */
    *leader_world_rank = world_rank;
    return evf_error_class(PMPI_Bcast(leader_world_rank, 1, MPI_INT, 0, evf_group_comm));
}

static int evf_group_open(const char *path)
{
    int rc = PMPI_File_open(evf_group_comm, path, MPI_MODE_WRONLY | MPI_MODE_CREATE, MPI_INFO_NULL,
                            &evf_group_file);
    if (rc == MPI_SUCCESS) {
        /* A full disk must come back as an error class, never abort the application. */
        PMPI_File_set_errhandler(evf_group_file, MPI_ERRORS_RETURN);
        /* A file left by an earlier run under the same name must not keep a stale tail. */
        rc = PMPI_File_set_size(evf_group_file, 0);
    }
    return evf_group_agree(evf_error_class(rc));
}

static int evf_group_write(uint64_t base, const void *data, uint64_t len, uint64_t *offset, uint64_t *total)
{
    uint64_t before = 0, lens[2] = {len, len}, sums[2] = {0, 0};
    /* Where this member's bytes go: after the earlier members' (an exclusive prefix sum); and
     * how far the file grows, so the next flush starts there on every member. */
    int rc = PMPI_Exscan(&len, &before, 1, MPI_UINT64_T, MPI_SUM, evf_group_comm);
    int me = 0;
    PMPI_Comm_rank(evf_group_comm, &me);
    if (me == 0) before = 0; /* Exscan leaves rank 0's result undefined */
    if (rc == MPI_SUCCESS) rc = PMPI_Allreduce(&lens[0], &sums[0], 1, MPI_UINT64_T, MPI_SUM, evf_group_comm);
    if (rc == MPI_SUCCESS) rc = PMPI_Allreduce(&lens[1], &sums[1], 1, MPI_UINT64_T, MPI_MAX, evf_group_comm);
    if (rc != MPI_SUCCESS) return evf_group_agree(evf_error_class(rc));
    *offset = before;
    *total = sums[0];
    /* MPI counts are int: the collective is repeated in rounds of at most 1 GiB, the same number
     * of rounds on every member (the largest contribution decides). */
    const uint64_t round = 1u << 30;
    uint64_t rounds = (sums[1] + round - 1) / round;
    int cls = MPI_SUCCESS;
    for (uint64_t i = 0; i < rounds; i++) {
        uint64_t from = i * round;
        int n = from >= len ? 0 : (int)(len - from < round ? len - from : round);
        MPI_Status st;
        int wrc = PMPI_File_write_at_all(evf_group_file, (MPI_Offset)(base + before + from),
                                         (const char *)data + (n ? from : 0), n, MPI_BYTE, &st);
        if (wrc != MPI_SUCCESS && cls == MPI_SUCCESS) cls = evf_error_class(wrc);
        if (wrc == MPI_SUCCESS && n > 0) {
            int written = 0;
            PMPI_Get_count(&st, MPI_BYTE, &written);
            if (written != n && cls == MPI_SUCCESS) cls = MPI_ERR_IO;
        }
    }
    /* Durable before the program resumes, like the per-rank writers' fdatasync. */
    int src = PMPI_File_sync(evf_group_file);
    if (src != MPI_SUCCESS && cls == MPI_SUCCESS) cls = evf_error_class(src);
    return evf_group_agree(cls);
}

static int evf_group_close(void)
{
    int rc = MPI_SUCCESS;
    if (evf_group_file != MPI_FILE_NULL) rc = evf_error_class(PMPI_File_close(&evf_group_file));
    if (evf_group_comm != MPI_COMM_NULL) PMPI_Comm_free(&evf_group_comm);
    return rc;
}

const evf_transport_t evf_transport_template = {
    0, 1, evf_tr_barrier, evf_tr_allreduce_or, evf_tr_reduce_f64, evf_tr_decision_start, evf_tr_decision_finish, evf_tr_bcast_f64, evf_tr_bcast_u64,
    evf_tr_send_f64, evf_tr_recv_f64, evf_tr_send_u64, evf_tr_recv_u64,
    evf_file_open, evf_file_write_at, evf_file_set_size, evf_file_sync, evf_file_close,
    MPI_ERR_NO_SPACE, MPI_ERR_QUOTA,
    evf_set_watching, evf_watchdog_abort,
    evf_group_setup, evf_group_open, evf_group_write, evf_group_close,
    evf_request_shared,
    MPI_ERR_IO,
};
