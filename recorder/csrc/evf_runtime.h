/* Runtime shared by the generated wrappers (evf_wrappers.c) and evf_runtime.c.
 * The C layer owns every MPI type: it turns handles into integers and hands plain records to the
 * Rust core through the evf_* hooks declared below. */
#ifndef EVF_RUNTIME_H
#define EVF_RUNTIME_H

#define _GNU_SOURCE
#include <mpi.h>
#ifdef OPEN_MPI
/* Open MPI declares its MPI-4 previews (MPIX_*_init persistent collectives) here. */
#include <mpi-ext.h>
#endif
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <x86intrin.h>

#define EVF_LIKELY(x) __builtin_expect(!!(x), 1)
#define EVF_UNLIKELY(x) __builtin_expect(!!(x), 0)
#define EVF_EXPORT __attribute__((visibility("default")))

/* Arrays of requests/statuses up to this length live on the wrapper's stack, so a Waitall or
 * Testall of up to 64 requests allocates nothing (about 3.5 KiB of stack at most). */
#define EVF_SMALL 64
/* A Fortran status (mpif.h, use mpi and mpi_f08) has the C MPI_Status layout in both MPIs. */
#define EVF_FSTAT_INTS ((int)(sizeof(MPI_Status) / sizeof(MPI_Fint)))

#define EVF_NO_COMM 0xffffffffu

/* Handles as integers: Open MPI's are pointers, MPICH's are ints. */
#ifdef OPEN_MPI
#define EVF_HANDLE_U64(h) ((uint64_t)(uintptr_t)(h))
#else
#define EVF_HANDLE_U64(h) ((uint64_t)(uint32_t)(h))
#endif
#define EVF_REQ_H(r) EVF_HANDLE_U64(r)

enum { EVF_REQ_NONE = 0, EVF_REQ_NEW = 1, EVF_REQ_NEW_PERSISTENT = 2, EVF_REQ_START = 3, EVF_REQ_FREE = 4, EVF_REQ_USE = 5 };
enum { EVF_KIND_NONE = 0, EVF_KIND_SEND = 1, EVF_KIND_RECV = 2, EVF_KIND_OTHER = 3 };
/* EVF_DONE_ALL_IN_STATUS: a Waitall/Testall that returned MPI_ERR_IN_STATUS, whose requests
 * completed (with or without an error of their own) unless their status says MPI_ERR_PENDING. */
enum { EVF_DONE_SINGLE = 0, EVF_DONE_ALL = 1, EVF_DONE_ANY = 2, EVF_DONE_SOME = 3, EVF_DONE_ALL_IN_STATUS = 4 };

/* Mirrored by recorder::ffi::CallRecord (same field order and types). */
typedef struct {
    uint64_t start;
    uint64_t end;
    uint64_t bytes;
    /* Bytes arriving in this rank's receive buffer in a collective (0 where none or unknown). */
    uint64_t recv_bytes;
    /* The wrapper's return address when call sites are recorded (--callsites), else 0. */
    uint64_t site;
    uint64_t req_handle;
    uint32_t comm;
    int32_t peer;
    int32_t tag;
    int32_t root;
    uint16_t func;
    uint8_t req_op;
    uint8_t req_kind;
    /* 1 for a poll that found nothing (Test* with flag 0, Iprobe without a message, Testsome
     * completing none): consecutive ones are folded into one record. */
    uint8_t idle;
} evf_call_t;

/* Mirrored by recorder::mpi_link::Transport. Every function returns an MPI error code. */
typedef struct {
    int rank;
    int size;
    int (*barrier)(void);
    int (*allreduce_or)(int value, int *result);
    int (*reduce_f64)(double value, int max, double *result_at_root);
    int (*decision_start)(uint64_t word);
    int (*decision_finish)(uint64_t *result);
    int (*bcast_f64)(double *value, int root);
    int (*bcast_u64)(uint64_t *value, int root);
    int (*send_f64)(double value, int dest, int tag);
    int (*recv_f64)(double *value, int source, int tag);
    int (*send_u64)(uint64_t value, int dest, int tag);
    int (*recv_u64)(uint64_t *value, int source, int tag);
    /* The MPI-IO trace writer: one file at a time, opened on MPI_COMM_SELF. These return the MPI
     * error class (0 = success), so the writer can tell a full disk (MPI_ERR_NO_SPACE) apart. */
    int (*file_open)(const char *path);
    int (*file_write_at)(uint64_t offset, const void *data, uint64_t len);
    int (*file_set_size)(uint64_t size);
    int (*file_sync)(void);
    int (*file_close)(void);
    int err_no_space;
    int err_quota;
    /* The watchdog's switches (see recorder/src/lifecycle/watchdog.rs). */
    void (*set_watching)(int on);
    void (*watchdog_abort)(int code);
    /* The aggregated layout: one file per group of ranks (a node, or the whole job), written by
     * collective MPI-IO on a sub-communicator of the private one. All four are collective over
     * the group, and return the MPI error class agreed by every member (0 = success). */
    int (*group_setup)(int per_node, int *group_rank, int *group_size, int *leader_world_rank);
    int (*group_open)(const char *path);
    int (*group_write)(uint64_t base, const void *data, uint64_t len, uint64_t *offset, uint64_t *total);
    int (*group_close)(void);
    /* Whether a request handle can name several live requests at once (requests.rs). */
    int (*request_shared)(uint64_t handle);
    /* MPI_ERR_IO: how both MPIs' MPI-IO report a write that failed with EDQUOT (and other errors
     * of the file system under one output directory). */
    int err_io;
} evf_transport_t;

/* The table of the recorder's own MPI operations (evf_transport.c), copied into place by evf_start. */
extern const evf_transport_t evf_transport_template;
/* The recorder's private communicator (a duplicate of the world, or of its own session's world
 * process set), and the one its MPI-IO trace writer opens files on. */
extern MPI_Comm evf_tr_comm;
extern MPI_Comm evf_self_comm;

/* ---- Rust core hooks (recorder::ffi) ---- */
int evf_rust_pre_init(void);
int evf_rust_init(int world_rank, int world_size, int thread_level);
void evf_rust_set_library(const char *version, int len);
void evf_rust_init_done(void);
void evf_rust_request_thread_level(int level);
void evf_rust_requests_for_sessions(void);
uint64_t evf_rust_settings_fingerprint(void);
int evf_rust_callsites(void);
void evf_rust_refuse(uint64_t mine, uint64_t lowest, uint64_t highest);
void evf_rec_call(const evf_call_t *call);
void *evf_rust_thread_buf(void);
int evf_rec_call_on(void *thread_buf, const evf_call_t *call);
void evf_rust_sample_end(void *thread_buf, uint16_t func, uint64_t call_end);
void evf_rec_completion(void *thread_buf, uint64_t req_handle, int32_t source, int32_t tag, uint64_t bytes,
                        int cancelled);
void evf_rec_commdef(uint32_t id, const int32_t *members, int n);
void evf_rec_remote_group(uint32_t id, const int32_t *members, int n);
void evf_rec_windef(uint32_t id, uint32_t comm);
void evf_rec_comm_origin(uint32_t id, uint32_t form, uint32_t parent, int32_t tag, const char *stringtag, size_t len);
void evf_rec_epoch_group(uint32_t win, const int32_t *members, int n);
int evf_after_blocking_collective(uint32_t comm, uint16_t func);
void evf_rust_charge(uint64_t ticks);
void evf_rust_charge_on(void *thread_buf, uint64_t ticks);
void evf_rust_lost(uint64_t events);
void evf_rust_finalize_begin(void);
void evf_rust_finalize_end(void);
void evf_abnormal_end(int signal);
void evf_rust_set_transport(const evf_transport_t *transport);
void evf_rust_set_spawn_key(const char *key);
void evf_rust_atfork_child(void);

/* ---- C runtime (evf_runtime.c) ---- */
extern __thread int evf_depth __attribute__((tls_model("initial-exec")));
extern int evf_active;
/* Set when the watchdog runs (--watchdog): wrappers then say what each call waits for. */
extern int evf_watching;
/* Whether wrappers take their return address (--callsites); set once at initialisation. */
extern int evf_callsites;
void evf_rust_watch_begin(uint16_t func, uint64_t start, uint32_t comm, int32_t peer, int32_t tag);
void evf_rust_watch_end(void);
void evf_set_watching(int on);
void evf_watchdog_abort(int code);
extern int evf_initialized;
extern int evf_clock_tsc;
/* This thread's Rust buffer, cached here because initial-exec TLS is a plain %fs load while
 * Rust's thread-locals in a cdylib go through __tls_get_addr. */
extern __thread void *evf_tb __attribute__((tls_model("initial-exec")));

void evf_init_begin(void);
void evf_init_end(uint16_t fid, uint64_t t0, uint64_t t1, int rc, int provided);
/* MPI_Finalize: whether it ends the recording (not while a session that started it is open). */
int evf_finalize_begin(void);
void evf_finalize_end(void);
/* The recording was started by MPI_Session_init (a program without MPI_Init, so far). */
extern int evf_session_mode;
uint32_t evf_comm_id_slow(MPI_Comm comm);
/* The recorder's id of `comm`: the predefined ones without a call. */
static inline uint32_t evf_comm_id(MPI_Comm comm)
{
    if (comm == MPI_COMM_WORLD) return 0;
    if (comm == MPI_COMM_SELF) return 1;
    return evf_comm_id_slow(comm);
}
void evf_comm_forget(MPI_Comm comm);
uint32_t evf_comm_define_like(MPI_Comm comm, MPI_Comm same_group_as);
uint32_t evf_win_id(MPI_Win win);
void evf_win_define(MPI_Win win, uint32_t comm);
void evf_epoch_group(MPI_Group group, uint32_t win);
void evf_win_forget(MPI_Win win);
void evf_msg_put(MPI_Message msg, uint32_t comm);
uint32_t evf_msg_take(MPI_Message msg, int32_t *peer);
int evf_session_init_begin(void);
void evf_session_init_end(uint16_t fid, int first, uint64_t t0, uint64_t t1, int rc);
int evf_session_finalize_begin(void);
void evf_session_finalize_end(void);
uint64_t evf_type_bytes_slow(int64_t count, MPI_Datatype type);
uint64_t evf_vbytes(const int *counts, MPI_Datatype type, MPI_Comm comm);
uint64_t evf_vbytes_c(const MPI_Count *counts, MPI_Datatype type, MPI_Comm comm);
/* Receive sizes of collectives (the recv_bytes roles of mpi_functions.tsv). */
#define EVF_RECV_AT_ROOT 1
#define EVF_RECV_BESIDE_ROOT 2
#define EVF_RECV_UNLESS_ROOT_GROUP 3
int evf_receives(int where, int root, MPI_Comm comm);
uint64_t evf_recv_bytes(int64_t count, MPI_Datatype type, MPI_Comm comm, int per_rank);
uint64_t evf_mine_bytes(const int *counts, MPI_Datatype type, MPI_Comm comm);
uint64_t evf_mine_bytes_c(const MPI_Count *counts, MPI_Datatype type, MPI_Comm comm);
void evf_complete_set(int kind, int n, const uint64_t *saved, MPI_Status *cst, MPI_Fint *fst, int flag,
                      int index, int outcount, const int *indices, int base);
void evf_complete_blocking(MPI_Status *status);
void evf_note_cancel(void);
void evf_completions_lost(int n);
void *evf_next_symbol(const char *name);
int evf_f_in_place(const void *buf);
int evf_f_status_ignored(const MPI_Fint *status);

/* Must match recorder::clock::now(). */
static inline uint64_t evf_now(void)
{
    if (EVF_LIKELY(evf_clock_tsc)) return __rdtsc();
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* This thread's Rust buffer (registered on first use). */
static inline void *evf_my_tb(void)
{
    void *tb = evf_tb;
    if (EVF_UNLIKELY(tb == NULL)) {
        tb = evf_rust_thread_buf();
        evf_tb = tb;
    }
    return tb;
}

/* Stores the record; returns nonzero when the call's cost is sampled: the wrapper then calls
 * evf_sample_end once its own work for the call is done (recorder/src/front/cost.rs). */
static inline int evf_record_call_s(const evf_call_t *call)
{
    return evf_rec_call_on(evf_my_tb(), call);
}

static inline void evf_sample_end(const evf_call_t *call)
{
    evf_rust_sample_end(evf_tb, call->func, call->end);
}

/* Stores the record, ending a sampled cost at once. */
static inline void evf_record_call(const evf_call_t *call)
{
    if (EVF_UNLIKELY(evf_record_call_s(call))) evf_sample_end(call);
}

static inline evf_call_t evf_call_blank(uint16_t fid)
{
    evf_call_t r = {0};
    r.func = fid;
    r.comm = EVF_NO_COMM;
    r.peer = -1;
    r.tag = -1;
    r.root = -1;
    return r;
}

/* Wildcards to the trace's own values (format::ANY_SOURCE = -2, PROC_NULL = -3, ANY_TAG = -2):
 * the two MPIs use different numbers for them. */
static inline int32_t evf_peer(int rank)
{
    if (rank == MPI_ANY_SOURCE) return -2;
    if (rank == MPI_PROC_NULL) return -3;
    return rank;
}

/* Roots to the trace's values (format::ROOT = -4, PROC_NULL = -3): on an intercommunicator the
 * root's group passes MPI_ROOT and MPI_PROC_NULL, which the two MPIs number differently, and
 * MPICH's MPI_PROC_NULL (-1) would read as no root at all. */
static inline int32_t evf_root(int root)
{
    if (root == MPI_ROOT) return -4;
    if (root == MPI_PROC_NULL) return -3;
    return root;
}

static inline int32_t evf_tag(int tag)
{
    return tag == MPI_ANY_TAG ? -2 : tag;
}

static inline uint64_t evf_bytes(int64_t count, MPI_Datatype type)
{
    if (count <= 0) return 0;
    return evf_type_bytes_slow(count, type);
}

#endif
