/* Hand-written part of the C layer: communicator ids, completions, init/finalize glue, Fortran
 * helpers. The private transport and the trace writers' MPI-IO are in evf_transport.c; the MPI_*
 * wrappers themselves are generated. */
#include "evf_runtime.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

__thread int evf_depth __attribute__((tls_model("initial-exec")));
__thread void *evf_tb __attribute__((tls_model("initial-exec")));
int evf_active;
int evf_watching;
int evf_callsites;

void evf_set_watching(int on) { evf_watching = on; }

/* Called from the watchdog's own thread: the job is stuck, so the usual rule that only the main
 * thread calls MPI (below MPI_THREAD_MULTIPLE) matters less than ending it. */
MPI_Comm evf_tr_comm = MPI_COMM_NULL;
/* Set when MPI_Session_init started the recorder: MPI_COMM_WORLD and MPI_COMM_SELF are then not
 * usable, and the recorder works on communicators of its own session. */
int evf_session_mode;
/* The communicator of the MPI-IO trace writer's files. */
MPI_Comm evf_self_comm = MPI_COMM_SELF;

void evf_watchdog_abort(int code)
{
    PMPI_Abort(evf_session_mode ? (evf_tr_comm != MPI_COMM_NULL ? evf_tr_comm : evf_self_comm) : MPI_COMM_WORLD,
               code);
}
int evf_initialized;
int evf_clock_tsc = 1;

static MPI_Group evf_world_group = MPI_GROUP_NULL;

/* ---------------- clock / init / finalize ---------------- */

void evf_init_begin(void)
{
    /* A session started the recorder: its clock is chosen and calibrated already. */
    if (evf_session_mode) return;
    evf_clock_tsc = evf_rust_pre_init();
}

static void evf_world_joins_session(uint16_t fid, uint64_t t0, uint64_t t1, int rc);

static void evf_define_comm(uint32_t id, MPI_Comm comm);
static void evf_resolve_fortran_constants(void);
static void evf_watch_comm_frees(void);

/* A world started by MPI_Comm_spawn numbers its ranks from 0 again: without a name of its own its
 * rank-00000.evf would overwrite the parent's. Its rank 0 makes a key (time and pid: unique among
 * the worlds of a run) and every rank of that world writes under spawn-<key>/. */
static void evf_name_spawned_world(int rank, int have_comm)
{
    MPI_Comm parent = MPI_COMM_NULL;
    if (PMPI_Comm_get_parent(&parent) != MPI_SUCCESS || parent == MPI_COMM_NULL) return;
    char key[64];
    memset(key, 0, sizeof key);
    if (rank == 0 || !have_comm) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        snprintf(key, sizeof key, "%llx-%ld",
                 (unsigned long long)ts.tv_sec * 1000000000ull + (unsigned long long)ts.tv_nsec, (long)getpid());
    }
    /* Without the private communicator each rank keeps its own key: separate directories, but
     * still never the parent's files. */
    if (have_comm) PMPI_Bcast(key, (int)sizeof key, MPI_CHAR, 0, evf_tr_comm);
    key[sizeof key - 1] = 0;
    evf_rust_set_spawn_key(key);
}

/* A forked child shares the parent's buffers and files by copy: it must neither record nor write
 * (its exit would append the parent's events at the parent's offsets). */
static void evf_atfork_child(void)
{
    evf_active = 0;
    evf_watching = 0;
    evf_rust_atfork_child();
}

/* The rest of initialisation, once MPI is up: rank, size and world group are known, and the private
 * communicator evf_tr_comm made (have_comm) or not. */
static void evf_start(uint16_t fid, uint64_t t0, uint64_t t1, int rank, int size, int provided, int have_comm)
{
    evf_resolve_fortran_constants();
    /* Read here because only the C layer sees the MPI library; the rank's RankInfo record names it. */
    static char evf_library[MPI_MAX_LIBRARY_VERSION_STRING];
    int library_len = 0;
    if (PMPI_Get_library_version(evf_library, &library_len) == MPI_SUCCESS)
        evf_rust_set_library(evf_library, library_len);
    /* Every rank takes part in the settings check, recording or not: it is collective, and a rank
     * that skipped it would leave the others waiting. The private communicator returns errors
     * instead of aborting, so a failure in the protocol reaches the recorder (which turns
     * offloading off on every rank together) rather than killing the job. */
    if (have_comm) PMPI_Comm_set_errhandler(evf_tr_comm, MPI_ERRORS_RETURN);
    /* Before the Rust core plans its output directories: a spawned world writes under its own. */
    if (!evf_session_mode) evf_name_spawned_world(rank, have_comm);
    int recording = evf_rust_init(rank, size, provided);
    uint64_t mine = recording ? evf_rust_settings_fingerprint() : 0;
    uint64_t both[2] = {mine, ~mine}, highest[2] = {0, 0};
    int agreed = have_comm &&
                 PMPI_Allreduce(both, highest, 2, MPI_UINT64_T, MPI_MAX, evf_tr_comm) == MPI_SUCCESS &&
                 highest[0] == ~highest[1];
    if (!recording) return; /* recording disabled: stay inert */
    if (have_comm && !agreed) {
        /* Different protocol settings (or a rank not recording) would make ranks disagree about
         * which collectives suspend: refuse on every rank rather than hang. */
        evf_rust_refuse(mine, ~highest[1], highest[0]);
        return;
    }
    if (have_comm) {
        evf_transport_t t = evf_transport_template;
        t.rank = rank;
        t.size = size;
        static evf_transport_t installed;
        installed = t;
        evf_rust_set_transport(&installed);
    } else {
        /* Only reached in session mode (MPI_Init refuses without the duplicate): no transport
         * means no collective protocol step, so each rank records and flushes on its own. */
        if (rank == 0)
            fprintf(stderr, "evenflush: the recorder's private communicator could not be created; "
                            "recording without offload protocol (local flushes only)\n");
    }
    /* Initialisation runs once per process, so this registers once. */
    pthread_atfork(NULL, NULL, evf_atfork_child);
    evf_watch_comm_frees();
    evf_callsites = evf_rust_callsites();
    evf_active = 1;
    if (evf_session_mode) {
        /* Ids 0 and 1 keep their meaning (the world process set, this process) although the
         * program has no MPI_COMM_WORLD. */
        int32_t self = rank;
        int32_t stack_members[64];
        int32_t *members = size <= 64 ? stack_members : (int32_t *)malloc(sizeof(int32_t) * (size_t)size);
        if (members != NULL) {
            for (int i = 0; i < size; i++) members[i] = i;
            evf_rec_commdef(0, members, size);
            if (members != stack_members) free(members);
        } else {
            evf_rec_commdef(0, NULL, 0);
        }
        evf_rec_commdef(1, &self, 1);
    } else {
        evf_define_comm(0, MPI_COMM_WORLD);
        evf_define_comm(1, MPI_COMM_SELF);
    }
    evf_call_t r = evf_call_blank(fid);
    r.start = t0;
    r.end = t1;
    evf_rec_call(&r);
    evf_rust_init_done();
}

void evf_init_end(uint16_t fid, uint64_t t0, uint64_t t1, int rc, int provided)
{
    if (evf_session_mode) {
        evf_world_joins_session(fid, t0, t1, rc);
        return;
    }
    if (rc != MPI_SUCCESS) return;
    evf_initialized = 1;
    int rank = 0, size = 1;
    PMPI_Comm_rank(MPI_COMM_WORLD, &rank);
    PMPI_Comm_size(MPI_COMM_WORLD, &size);
    PMPI_Comm_group(MPI_COMM_WORLD, &evf_world_group);
    /* Every rank makes the private duplicate, recording or not: it is collective. Without it, the
     * settings check cannot run and the recorder refuses (evf_start). */
    int have_comm = PMPI_Comm_dup(MPI_COMM_WORLD, &evf_tr_comm) == MPI_SUCCESS;
    if (!have_comm) {
        uint64_t mine = evf_rust_init(rank, size, provided) ? evf_rust_settings_fingerprint() : 0;
        if (mine != 0) evf_rust_refuse(mine, 0, 0);
        return;
    }
    /* MPI_Init names no level: the one MPI gave it decides whether application threads may make
     * and complete requests at once (the request table then locks). */
    int level = provided;
    if (level < 0 && PMPI_Query_thread(&level) != MPI_SUCCESS) level = -1;
    evf_rust_request_thread_level(level);
    evf_start(fid, t0, t1, rank, size, provided, have_comm);
}

/* ---------------- sessions (MPI-4) ----------------
 * A program may use MPI through sessions only, never calling MPI_Init. Its first MPI_Session_init
 * then starts the recorder, which opens a session of its own: its world group and private
 * communicator (made with MPI_Comm_create_from_group) outlive any of the program's sessions, and
 * the program's MPI_Session_finalize of its last session ends the recording, the way
 * MPI_Finalize does. Programs that also call MPI_Init are recorded in the world model as before;
 * their sessions calls are then ordinary calls. */

static atomic_int evf_sessions_open;
/* The world model joined a recording that a session started (MPI_Init while a session is open):
 * the recording then ends at the later of MPI_Finalize and the last MPI_Session_finalize. */
static atomic_int evf_world_open;
/* The recording ended: a later MPI_Init or MPI_Finalize must not end it again. */
static atomic_int evf_ended;
#if MPI_VERSION >= 4
static MPI_Session evf_own_session = MPI_SESSION_NULL;
#endif

int evf_session_init_begin(void)
{
    if (evf_initialized) return 0;
    evf_init_begin();
    return 1;
}

void evf_session_init_end(uint16_t fid, int first, uint64_t t0, uint64_t t1, int rc)
{
    if (rc != MPI_SUCCESS) return;
    /* A session has a thread level of its own, not the world model's. */
    evf_rust_requests_for_sessions();
    atomic_fetch_add(&evf_sessions_open, 1);
    if (!first) {
        if (evf_active) {
            evf_call_t r = evf_call_blank(fid);
            r.start = t0;
            r.end = t1;
            evf_record_call(&r);
        }
        return;
    }
#if MPI_VERSION >= 4
    evf_initialized = 1;
    evf_session_mode = 1;
    if (PMPI_Session_init(MPI_INFO_NULL, MPI_ERRORS_RETURN, &evf_own_session) != MPI_SUCCESS ||
        PMPI_Group_from_session_pset(evf_own_session, "mpi://WORLD", &evf_world_group) != MPI_SUCCESS) {
        fprintf(stderr, "evenflush: cannot open the recorder's own MPI session; nothing is recorded\n");
        return;
    }
    int rank = 0, size = 1;
    PMPI_Group_rank(evf_world_group, &rank);
    PMPI_Group_size(evf_world_group, &size);
    MPI_Group self_group;
    evf_self_comm = MPI_COMM_NULL;
    if (PMPI_Group_from_session_pset(evf_own_session, "mpi://SELF", &self_group) == MPI_SUCCESS) {
        if (PMPI_Comm_create_from_group(self_group, "org.evenflush.self", MPI_INFO_NULL, MPI_ERRORS_RETURN,
                                        &evf_self_comm) != MPI_SUCCESS)
            evf_self_comm = MPI_COMM_NULL;
        PMPI_Group_free(&self_group);
    }
    /* Collective over the world process set, like the duplicate in MPI_Init. If it fails, the
     * recorder must not take any further collective step: evf_start records locally. */
    int have_comm = PMPI_Comm_create_from_group(evf_world_group, "org.evenflush.private", MPI_INFO_NULL,
                                                MPI_ERRORS_RETURN, &evf_tr_comm) == MPI_SUCCESS;
    if (!have_comm) evf_tr_comm = MPI_COMM_NULL;
    int provided = -1;
    if (PMPI_Query_thread(&provided) != MPI_SUCCESS) provided = -1;
    evf_start(fid, t0, t1, rank, size, provided, have_comm);
#else
    (void)fid;
    (void)t0;
    (void)t1;
#endif
}

/* The end of the recording, before the MPI call that ends it: the last flush needs the private
 * communicator, which is freed here. Returns 0 if the recording ended before. */
static int evf_stop_begin(void)
{
    if (atomic_exchange(&evf_ended, 1)) return 0;
    evf_rust_finalize_begin();
    evf_rust_set_transport(NULL);
    if (evf_tr_comm != MPI_COMM_NULL) PMPI_Comm_free(&evf_tr_comm);
    if (evf_world_group != MPI_GROUP_NULL) PMPI_Group_free(&evf_world_group);
    return 1;
}

/* After the MPI call that ended the recording: write everything. */
static void evf_stop_end(void)
{
#if MPI_VERSION >= 4
    if (evf_session_mode) {
        if (evf_self_comm != MPI_COMM_NULL && evf_self_comm != MPI_COMM_SELF) PMPI_Comm_free(&evf_self_comm);
        if (evf_own_session != MPI_SESSION_NULL) PMPI_Session_finalize(&evf_own_session);
    }
#endif
    evf_active = 0;
    evf_rust_finalize_end();
}

/* MPI_Init (or _thread) in a program whose session started the recorder. While a session is open
 * the world model joins the recording: MPI_Init is an ordinary call, and MPI_COMM_WORLD is id 0,
 * the world process set's. After the last session ended the recording (MPICH 4.0 cannot even
 * initialise then), nothing more is recorded, and the program is told so. */
static void evf_world_joins_session(uint16_t fid, uint64_t t0, uint64_t t1, int rc)
{
    if (rc != MPI_SUCCESS) return;
    if (!evf_active || atomic_load(&evf_ended)) {
        int rank = 0;
        PMPI_Comm_rank(MPI_COMM_WORLD, &rank);
        if (rank == 0)
            fprintf(stderr, "evenflush: MPI_Init after the last MPI_Session_finalize ended the recording; "
                            "the world model's calls are not recorded\n");
        return;
    }
    atomic_store(&evf_world_open, 1);
    evf_call_t r = evf_call_blank(fid);
    r.start = t0;
    r.end = t1;
    evf_record_call(&r);
}

int evf_session_finalize_begin(void)
{
    if (!evf_session_mode) return 0;
    if (atomic_fetch_sub(&evf_sessions_open, 1) != 1) return 0;
    if (atomic_load(&evf_world_open)) return 0;
    return evf_stop_begin();
}

void evf_session_finalize_end(void)
{
    evf_stop_end();
}

int evf_finalize_begin(void)
{
    if (evf_session_mode) {
        /* The world leaves a recording a session started: it ends here only if no session is
         * open any more. */
        atomic_store(&evf_world_open, 0);
        if (atomic_load(&evf_sessions_open) > 0) return 0;
    }
    return evf_stop_begin();
}

void evf_finalize_end(void)
{
    evf_stop_end();
}

/* ---------------- communicator ids ----------------
 * Lookups hit a per-thread cache of a few handles; the shared table is only searched (under a
 * mutex) on a miss. Freeing a communicator bumps a generation counter that empties every cache,
 * so a reused handle gets a new id and a new definition. */

#define EVF_CACHE 4
typedef struct {
    uint64_t handle;
    uint32_t id;
} evf_comm_entry;

static pthread_mutex_t evf_comm_lock = PTHREAD_MUTEX_INITIALIZER;
static evf_comm_entry *evf_comms;
static size_t evf_ncomms, evf_cap_comms;
static uint32_t evf_next_comm_id = 2;
static atomic_uint evf_comm_gen;

static __thread evf_comm_entry evf_cache[EVF_CACHE] __attribute__((tls_model("initial-exec")));
static __thread unsigned evf_cache_gen __attribute__((tls_model("initial-exec")));
static __thread unsigned evf_cache_next __attribute__((tls_model("initial-exec")));
static __thread int evf_cache_valid __attribute__((tls_model("initial-exec")));

/* Communicators freed where no wrapper records it (MPI_Comm_free called from inside another MPI
 * call, e.g. an attribute delete callback as PETSc does, or by the MPI library itself) must still
 * be forgotten, or a reused handle would inherit the old id and members. Every communicator the
 * recorder names carries an attribute whose delete callback MPI runs whenever it is freed, at any
 * depth. The callback may run with the MPI library's own lock held, so it takes no lock of ours
 * (a thread in evf_comm_id holds evf_comm_lock while calling MPI): it pushes the handle on a
 * lock-free list that the next lookup drains, and empties every thread's cache. */
typedef struct evf_dead_comm {
    uint64_t handle;
    struct evf_dead_comm *next;
} evf_dead_comm;

static _Atomic(evf_dead_comm *) evf_dead_comms;
static int evf_comm_keyval = MPI_KEYVAL_INVALID;

static int evf_comm_deleted(MPI_Comm comm, int keyval, void *value, void *extra)
{
    (void)keyval;
    (void)value;
    (void)extra;
    evf_dead_comm *node = (evf_dead_comm *)malloc(sizeof *node);
    if (node != NULL) {
        node->handle = EVF_HANDLE_U64(comm);
        node->next = atomic_load_explicit(&evf_dead_comms, memory_order_relaxed);
        while (!atomic_compare_exchange_weak_explicit(&evf_dead_comms, &node->next, node, memory_order_release,
                                                      memory_order_relaxed)) {
        }
    }
    atomic_fetch_add_explicit(&evf_comm_gen, 1, memory_order_release);
    return MPI_SUCCESS;
}

static void evf_watch_comm_frees(void)
{
    /* MPI_COMM_NULL_COPY_FN: a duplicate is a new communicator, named on its own first use. */
    if (PMPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, evf_comm_deleted, &evf_comm_keyval, NULL) != MPI_SUCCESS)
        evf_comm_keyval = MPI_KEYVAL_INVALID;
}

static void evf_remove_comm_locked(uint64_t h)
{
    for (size_t i = 0; i < evf_ncomms; i++)
        if (evf_comms[i].handle == h) {
            evf_comms[i] = evf_comms[--evf_ncomms];
            break;
        }
}

/* Under evf_comm_lock. */
static void evf_drain_dead_comms_locked(void)
{
    evf_dead_comm *node = atomic_exchange_explicit(&evf_dead_comms, NULL, memory_order_acquire);
    /* Pushed newest first: replay oldest first (a handle freed, reused and freed again). */
    evf_dead_comm *reversed = NULL;
    while (node != NULL) {
        evf_dead_comm *next = node->next;
        node->next = reversed;
        reversed = node;
        node = next;
    }
    while (reversed != NULL) {
        evf_dead_comm *next = reversed->next;
        evf_remove_comm_locked(reversed->handle);
        free(reversed);
        reversed = next;
    }
}

/* A group's members as world ranks (MPI_UNDEFINED for processes outside this world: spawned or
 * connected ones), handed to `emit`. */
static void evf_emit_group(uint32_t id, MPI_Group group, void (*emit)(uint32_t, const int32_t *, int))
{
    int n = 0;
    if (PMPI_Group_size(group, &n) != MPI_SUCCESS || n < 0) n = 0;
    int32_t stack_buf[2 * 64];
    int32_t *buf = n <= 64 ? stack_buf : (int32_t *)malloc(sizeof(int32_t) * 2 * (size_t)n);
    if (buf == NULL) {
        emit(id, NULL, 0);
        return;
    }
    int32_t *local = buf, *world = buf + n;
    for (int i = 0; i < n; i++) local[i] = i;
    if (n > 0) PMPI_Group_translate_ranks(group, n, local, evf_world_group, world);
    emit(id, world, n);
    if (buf != stack_buf) free(buf);
}

/* As evf_emit_group, for a group the recorder made: frees it. */
static void evf_define_group(uint32_t id, MPI_Group group, void (*emit)(uint32_t, const int32_t *, int))
{
    evf_emit_group(id, group, emit);
    PMPI_Group_free(&group);
}

/* The group argument of MPI_Win_post/MPI_Win_start on window `win`, recorded right before the
 * call so the reader can pair exposure and access epochs; the group stays the caller's. Only
 * these two calls pay for the translation. */
void evf_epoch_group(MPI_Group group, uint32_t win)
{
    if (group == MPI_GROUP_NULL) return;
    evf_emit_group(win, group, evf_rec_epoch_group);
}

/* Defines `id` with the group of `comm` and, for an intercommunicator, its remote group, which is
 * what the peers of its point-to-point calls and roots name. */
static void evf_define_comm(uint32_t id, MPI_Comm comm)
{
    MPI_Group group;
    if (PMPI_Comm_group(comm, &group) != MPI_SUCCESS) {
        evf_rec_commdef(id, NULL, 0);
        return;
    }
    evf_define_group(id, group, evf_rec_commdef);
    int inter = 0;
    if (PMPI_Comm_test_inter(comm, &inter) == MPI_SUCCESS && inter &&
        PMPI_Comm_remote_group(comm, &group) == MPI_SUCCESS)
        evf_define_group(id, group, evf_rec_remote_group);
}

static uint32_t evf_comm_lookup(MPI_Comm comm, MPI_Comm group_of);

uint32_t evf_comm_id_slow(MPI_Comm comm) { return evf_comm_lookup(comm, comm); }

/* MPI_Comm_idup's new handle may not be used before its request completes, but its group is that
 * of the communicator it copies: defined from there, at the call. */
uint32_t evf_comm_define_like(MPI_Comm comm, MPI_Comm same_group_as) { return evf_comm_lookup(comm, same_group_as); }

/* The id of `comm`, defined (with the members of `group_of`) on first sight. */
static uint32_t evf_comm_lookup(MPI_Comm comm, MPI_Comm group_of)
{
    if (comm == MPI_COMM_WORLD) return 0;
    if (comm == MPI_COMM_SELF) return 1;
    if (comm == MPI_COMM_NULL) return EVF_NO_COMM;
    uint64_t h = EVF_HANDLE_U64(comm);
    unsigned gen = atomic_load_explicit(&evf_comm_gen, memory_order_acquire);
    if (evf_cache_valid && evf_cache_gen == gen) {
        for (int i = 0; i < EVF_CACHE; i++)
            if (evf_cache[i].handle == h && h != 0) return evf_cache[i].id;
    } else {
        memset(evf_cache, 0, sizeof evf_cache);
        evf_cache_gen = gen;
        evf_cache_valid = 1;
    }
    uint32_t id = EVF_NO_COMM;
    int created = 0;
    pthread_mutex_lock(&evf_comm_lock);
    evf_drain_dead_comms_locked();
    for (size_t i = 0; i < evf_ncomms; i++)
        if (evf_comms[i].handle == h) {
            id = evf_comms[i].id;
            break;
        }
    if (id == EVF_NO_COMM) {
        if (evf_ncomms == evf_cap_comms) {
            size_t cap = evf_cap_comms ? 2 * evf_cap_comms : 32;
            evf_comm_entry *grown = (evf_comm_entry *)realloc(evf_comms, cap * sizeof *grown);
            if (grown != NULL) {
                evf_comms = grown;
                evf_cap_comms = cap;
            }
        }
        id = evf_next_comm_id++;
        /* Defined before it is added, so no thread can use the id before its CommDef exists. */
        evf_define_comm(id, group_of);
        if (evf_ncomms < evf_cap_comms) evf_comms[evf_ncomms++] = (evf_comm_entry){h, id};
        created = 1;
    }
    pthread_mutex_unlock(&evf_comm_lock);
    /* Outside the lock: setting an attribute that is already there runs its delete callback. */
    if (created && evf_comm_keyval != MPI_KEYVAL_INVALID) {
        void *value;
        int flag = 0;
        if (PMPI_Comm_get_attr(comm, evf_comm_keyval, &value, &flag) == MPI_SUCCESS && !flag)
            PMPI_Comm_set_attr(comm, evf_comm_keyval, NULL);
    }
    evf_cache[evf_cache_next % EVF_CACHE] = (evf_comm_entry){h, id};
    evf_cache_next++;
    return id;
}

void evf_comm_forget(MPI_Comm comm)
{
    uint64_t h = EVF_HANDLE_U64(comm);
    pthread_mutex_lock(&evf_comm_lock);
    evf_drain_dead_comms_locked();
    evf_remove_comm_locked(h);
    atomic_fetch_add_explicit(&evf_comm_gen, 1, memory_order_release);
    pthread_mutex_unlock(&evf_comm_lock);
}

/* ---------------- window ids ----------------
 * Windows take their ids from the communicators' counter, and each is defined by a CommDef of its
 * group (so the target ranks of one-sided calls translate to world ranks like any peer) followed
 * by a WinDef naming the communicator it was created over. One-sided calls are rarer than
 * point-to-point ones, so a short list under the communicators' lock does. */

typedef struct {
    uint64_t handle;
    uint32_t id;
} evf_win_entry;

static evf_win_entry *evf_wins;
static size_t evf_nwins, evf_cap_wins;

/* Called with evf_comm_lock held. */
static uint32_t evf_win_add(MPI_Win win, uint32_t comm)
{
    if (evf_nwins == evf_cap_wins) {
        size_t cap = evf_cap_wins ? 2 * evf_cap_wins : 8;
        evf_win_entry *grown = (evf_win_entry *)realloc(evf_wins, cap * sizeof *grown);
        if (grown != NULL) {
            evf_wins = grown;
            evf_cap_wins = cap;
        }
    }
    uint32_t id = evf_next_comm_id++;
    MPI_Group group;
    if (PMPI_Win_get_group(win, &group) == MPI_SUCCESS)
        evf_define_group(id, group, evf_rec_commdef);
    else
        evf_rec_commdef(id, NULL, 0);
    evf_rec_windef(id, comm);
    /* Window creation is collective over `comm`: counted among its constructors. */
    if (comm != EVF_NO_COMM) evf_rec_comm_origin(id, 0, comm, 0, NULL, 0);
    if (evf_nwins < evf_cap_wins) evf_wins[evf_nwins++] = (evf_win_entry){EVF_HANDLE_U64(win), id};
    return id;
}

void evf_win_define(MPI_Win win, uint32_t comm)
{
    pthread_mutex_lock(&evf_comm_lock);
    (void)evf_win_add(win, comm);
    pthread_mutex_unlock(&evf_comm_lock);
}

uint32_t evf_win_id(MPI_Win win)
{
    if (win == MPI_WIN_NULL) return EVF_NO_COMM;
    uint64_t h = EVF_HANDLE_U64(win);
    uint32_t id = EVF_NO_COMM;
    pthread_mutex_lock(&evf_comm_lock);
    /* Newest first: a reused handle's live entry is the last one added. */
    for (size_t i = evf_nwins; i-- > 0;)
        if (evf_wins[i].handle == h) {
            id = evf_wins[i].id;
            break;
        }
    /* Created before recording began: defined now, its communicator unknown. */
    if (id == EVF_NO_COMM) id = evf_win_add(win, EVF_NO_COMM);
    pthread_mutex_unlock(&evf_comm_lock);
    return id;
}

void evf_win_forget(MPI_Win win)
{
    uint64_t h = EVF_HANDLE_U64(win);
    pthread_mutex_lock(&evf_comm_lock);
    for (size_t i = evf_nwins; i-- > 0;)
        if (evf_wins[i].handle == h) {
            memmove(&evf_wins[i], &evf_wins[i + 1], (evf_nwins - i - 1) * sizeof *evf_wins);
            evf_nwins--;
            break;
        }
    pthread_mutex_unlock(&evf_comm_lock);
}

/* ---------------- matched-probe messages ----------------
 * MPI_Mrecv/MPI_Imrecv name no communicator: the message handle that Mprobe/Improbe returned
 * carries it. A message is received soon after its probe, so a small ring of the latest ones
 * suffices; an evicted (or pre-recording) message leaves the receive's communicator unknown. */

#define EVF_MSGS 64
static struct {
    uint64_t handle;
    uint32_t comm;
    int used;
} evf_msgs[EVF_MSGS];
static unsigned evf_msg_next;
static pthread_mutex_t evf_msg_lock = PTHREAD_MUTEX_INITIALIZER;

void evf_msg_put(MPI_Message msg, uint32_t comm)
{
    if (msg == MPI_MESSAGE_NULL || msg == MPI_MESSAGE_NO_PROC) return;
    pthread_mutex_lock(&evf_msg_lock);
    unsigned k = evf_msg_next++ % EVF_MSGS;
    evf_msgs[k].handle = EVF_HANDLE_U64(msg);
    evf_msgs[k].comm = comm;
    evf_msgs[k].used = 1;
    pthread_mutex_unlock(&evf_msg_lock);
}

uint32_t evf_msg_take(MPI_Message msg, int32_t *peer)
{
    if (msg == MPI_MESSAGE_NO_PROC) {
        *peer = -3; /* a probe of MPI_PROC_NULL: the receive completes at once, from nobody */
        return EVF_NO_COMM;
    }
    if (msg == MPI_MESSAGE_NULL) return EVF_NO_COMM;
    uint64_t h = EVF_HANDLE_U64(msg);
    uint32_t comm = EVF_NO_COMM;
    pthread_mutex_lock(&evf_msg_lock);
    for (unsigned i = 0; i < EVF_MSGS; i++) {
        unsigned k = (evf_msg_next - 1 - i) % EVF_MSGS;
        if (evf_msgs[k].used && evf_msgs[k].handle == h) {
            comm = evf_msgs[k].comm;
            evf_msgs[k].used = 0;
            break;
        }
    }
    pthread_mutex_unlock(&evf_msg_lock);
    return comm;
}

/* ---------------- sizes ---------------- */

/* Sizes of predefined datatypes, per thread: every send, receive and collective asks for one.
 * Only predefined (named) types are kept: their handles are never freed, so an entry cannot go
 * stale, whereas a derived type's handle may be freed and given to another type. */
#define EVF_TYPE_CACHE 16
typedef struct {
    uintptr_t key;
    int size;
} evf_type_slot;
static __thread evf_type_slot evf_type_cache[EVF_TYPE_CACHE] __attribute__((tls_model("initial-exec")));

/* The handle's bits (a pointer in Open MPI, an int in MPICH), never 0 for a real type. */
static inline uintptr_t evf_type_key(MPI_Datatype type)
{
    uintptr_t key = 0;
    memcpy(&key, &type, sizeof type < sizeof key ? sizeof type : sizeof key);
    return key;
}

static int evf_type_size(MPI_Datatype type, int *size)
{
    uintptr_t key = evf_type_key(type);
    evf_type_slot *slot = &evf_type_cache[((key >> 4) ^ (key >> 12)) % EVF_TYPE_CACHE];
    if (key != 0 && slot->key == key) {
        *size = slot->size;
        return 1;
    }
    if (PMPI_Type_size(type, size) != MPI_SUCCESS || *size < 0) return 0;
    int ints = 0, addrs = 0, types = 0, combiner = 0;
    if (key != 0 && PMPI_Type_get_envelope(type, &ints, &addrs, &types, &combiner) == MPI_SUCCESS &&
        combiner == MPI_COMBINER_NAMED) {
        slot->key = key;
        slot->size = *size;
    }
    return 1;
}

uint64_t evf_type_bytes_slow(int64_t count, MPI_Datatype type)
{
    if (type == MPI_DATATYPE_NULL) return 0;
    int size = 0;
    if (!evf_type_size(type, &size)) return 0;
    return (uint64_t)count * (uint64_t)size;
}

/* Entries of a v-collective's count array: one per rank of the (remote) group. */
static int evf_vlen(MPI_Comm comm)
{
    int inter = 0, n = 0;
    PMPI_Comm_test_inter(comm, &inter);
    if (inter)
        PMPI_Comm_remote_size(comm, &n);
    else
        PMPI_Comm_size(comm, &n);
    return n;
}

uint64_t evf_vbytes(const int *counts, MPI_Datatype type, MPI_Comm comm)
{
    if (counts == NULL || type == MPI_DATATYPE_NULL) return 0;
    int n = evf_vlen(comm), size = 0;
    if (!evf_type_size(type, &size)) return 0;
    uint64_t total = 0;
    for (int i = 0; i < n; i++)
        if (counts[i] > 0) total += (uint64_t)counts[i];
    return total * (uint64_t)size;
}

uint64_t evf_vbytes_c(const MPI_Count *counts, MPI_Datatype type, MPI_Comm comm)
{
    if (counts == NULL || type == MPI_DATATYPE_NULL) return 0;
    int n = evf_vlen(comm), size = 0;
    if (!evf_type_size(type, &size)) return 0;
    uint64_t total = 0;
    for (int i = 0; i < n; i++)
        if (counts[i] > 0) total += (uint64_t)counts[i];
    return total * (uint64_t)size;
}

/* Whether this rank's receive buffer gets data in a collective rooted at `root`. On an
 * intercommunicator the root passes MPI_ROOT, the rest of its group MPI_PROC_NULL, and the other
 * group the root's rank: only that other group receives a broadcast or a scatter. */
int evf_receives(int where, int root, MPI_Comm comm)
{
    int inter = 0;
    PMPI_Comm_test_inter(comm, &inter);
    if (inter) {
        int in_root_group = root == MPI_ROOT || root == MPI_PROC_NULL;
        if (where == EVF_RECV_AT_ROOT) return root == MPI_ROOT;
        return !in_root_group;
    }
    if (where == EVF_RECV_UNLESS_ROOT_GROUP) return 1;
    int me = -1;
    PMPI_Comm_rank(comm, &me);
    return where == EVF_RECV_AT_ROOT ? root == me : root != me;
}

uint64_t evf_recv_bytes(int64_t count, MPI_Datatype type, MPI_Comm comm, int per_rank)
{
    uint64_t piece = evf_bytes(count, type);
    return per_rank ? piece * (uint64_t)evf_vlen(comm) : piece;
}

/* A Reduce_scatter's share of this rank: its own entry of the count array. */
uint64_t evf_mine_bytes(const int *counts, MPI_Datatype type, MPI_Comm comm)
{
    int me = -1;
    if (counts == NULL || PMPI_Comm_rank(comm, &me) != MPI_SUCCESS || me < 0) return 0;
    return evf_bytes(counts[me], type);
}

uint64_t evf_mine_bytes_c(const MPI_Count *counts, MPI_Datatype type, MPI_Comm comm)
{
    int me = -1;
    if (counts == NULL || PMPI_Comm_rank(comm, &me) != MPI_SUCCESS || me < 0) return 0;
    return evf_bytes((int64_t)counts[me], type);
}

/* ---------------- completions ---------------- */

/* Completions are processed after the completion call's record was stored. Those of calls that
 * complete several requests (Waitall, Waitsome, Testall, Testsome) are measured here (two clock
 * reads, only when something completed) and charged to the thread's next event, like the other
 * slow paths (see recorder/src/front/cost.rs); a call that completes one request at most has that
 * processing in its sampled cost instead (t_first NULL). */
/* Set by the first MPI_Cancel: a program that never cancels has no cancelled completion, so its
 * completions need not ask MPI (a call into the library per completed request). */
static atomic_int evf_cancel_seen;

void evf_note_cancel(void)
{
    atomic_store_explicit(&evf_cancel_seen, 1, memory_order_relaxed);
}

static void evf_emit(uint64_t handle, MPI_Status *st, uint64_t *t_first)
{
    if (t_first != NULL && *t_first == 0) *t_first = evf_now();
    int count = 0, cancelled = 0;
    if (PMPI_Get_count(st, MPI_BYTE, &count) != MPI_SUCCESS || count == MPI_UNDEFINED || count < 0)
        count = 0;
    if (atomic_load_explicit(&evf_cancel_seen, memory_order_relaxed)) PMPI_Test_cancelled(st, &cancelled);
    evf_rec_completion(evf_my_tb(), handle, evf_peer(st->MPI_SOURCE), evf_tag(st->MPI_TAG), (uint64_t)count,
                       cancelled);
}

static MPI_Status *evf_status_at(MPI_Status *cst, MPI_Fint *fst, int k, MPI_Status *tmp)
{
    if (cst != NULL) return &cst[k];
    PMPI_Status_f2c(fst + (size_t)k * EVF_FSTAT_INTS, tmp);
    return tmp;
}

void evf_complete_set(int kind, int n, const uint64_t *saved, MPI_Status *cst, MPI_Fint *fst, int flag,
                      int index, int outcount, const int *indices, int base)
{
    const uint64_t null_h = EVF_REQ_H(MPI_REQUEST_NULL);
    MPI_Status tmp;
    uint64_t t = 0;
    switch (kind) {
    case EVF_DONE_SINGLE:
        if (flag && n >= 1 && saved[0] != null_h) evf_emit(saved[0], evf_status_at(cst, fst, 0, &tmp), NULL);
        break;
    case EVF_DONE_ALL:
        if (!flag) break;
        for (int i = 0; i < n; i++)
            if (saved[i] != null_h) evf_emit(saved[i], evf_status_at(cst, fst, i, &tmp), &t);
        break;
    case EVF_DONE_ALL_IN_STATUS:
        for (int i = 0; i < n; i++) {
            if (saved[i] == null_h) continue;
            MPI_Status *st = evf_status_at(cst, fst, i, &tmp);
            if (st->MPI_ERROR != MPI_ERR_PENDING) evf_emit(saved[i], st, &t);
        }
        break;
    case EVF_DONE_ANY: {
        if (!flag || index == MPI_UNDEFINED) break;
        int i = index - base;
        if (i >= 0 && i < n && saved[i] != null_h) evf_emit(saved[i], evf_status_at(cst, fst, 0, &tmp), NULL);
        break;
    }
    case EVF_DONE_SOME:
        if (outcount == MPI_UNDEFINED || indices == NULL) break;
        for (int k = 0; k < outcount; k++) {
            int i = indices[k] - base;
            if (i >= 0 && i < n && saved[i] != null_h) evf_emit(saved[i], evf_status_at(cst, fst, k, &tmp), &t);
        }
        break;
    default:
        break;
    }
    if (t != 0) evf_rust_charge_on(evf_my_tb(), evf_now() - t);
}

/* No memory for the request copies or the substitute status array: the completions of this call
 * cannot be recorded. Counted (at most n were lost) and marked, never silent. */
void evf_completions_lost(int n)
{
    evf_rust_lost(n > 0 ? (uint64_t)n : 0);
}

/* A blocking receive's completion: in the call's sampled cost (see evf_emit). */
void evf_complete_blocking(MPI_Status *status)
{
    evf_emit(0, status, NULL);
}

/* ---------------- Fortran helpers ---------------- */

void *evf_next_symbol(const char *name)
{
    void *sym = dlsym(RTLD_NEXT, name);
    if (sym == NULL) {
        fprintf(stderr, "evenflush: the MPI library defines no %s; cannot forward the call\n", name);
        abort();
    }
    return sym;
}

/* Addresses the Fortran bindings use for MPI_IN_PLACE and MPI_STATUS(ES)_IGNORE. They differ per
 * MPI and binding, so every known spelling is looked up once. */
#define EVF_MAX_SENTINELS 16
static const void *evf_in_place_addrs[EVF_MAX_SENTINELS];
static int evf_n_in_place;
static const void *evf_status_ignore_addrs[EVF_MAX_SENTINELS];
static int evf_n_status_ignore;

static void evf_add(const void **arr, int *n, const void *p)
{
    if (p != NULL && *n < EVF_MAX_SENTINELS) arr[(*n)++] = p;
}

static void evf_resolve_fortran_constants(void)
{
    static const char *in_place[] = {"mpi_fortran_in_place_", "mpi_fortran_in_place", "mpi_fortran_in_place__",
                                     "MPI_FORTRAN_IN_PLACE", "mpifcmb5_", "MPIR_F08_MPI_IN_PLACE"};
    for (size_t i = 0; i < sizeof in_place / sizeof *in_place; i++)
        evf_add(evf_in_place_addrs, &evf_n_in_place, dlsym(RTLD_DEFAULT, in_place[i]));
    /* MPICH keeps a pointer to its common block. */
    void **indirect = (void **)dlsym(RTLD_DEFAULT, "MPIR_F_MPI_IN_PLACE");
    if (indirect != NULL) evf_add(evf_in_place_addrs, &evf_n_in_place, *indirect);

    evf_add(evf_status_ignore_addrs, &evf_n_status_ignore, MPI_F_STATUS_IGNORE);
    evf_add(evf_status_ignore_addrs, &evf_n_status_ignore, MPI_F_STATUSES_IGNORE);
#ifdef MPICH
    evf_add(evf_status_ignore_addrs, &evf_n_status_ignore, MPI_F08_STATUS_IGNORE);
    evf_add(evf_status_ignore_addrs, &evf_n_status_ignore, MPI_F08_STATUSES_IGNORE);
#endif
    static const char *ignore[] = {"mpi_fortran_status_ignore_", "mpi_fortran_statuses_ignore_",
                                   "MPIR_F08_MPI_STATUS_IGNORE_OBJ", "MPIR_F08_MPI_STATUSES_IGNORE_OBJ"};
    for (size_t i = 0; i < sizeof ignore / sizeof *ignore; i++)
        evf_add(evf_status_ignore_addrs, &evf_n_status_ignore, dlsym(RTLD_DEFAULT, ignore[i]));
}

int evf_f_in_place(const void *buf)
{
    for (int i = 0; i < evf_n_in_place; i++)
        if (buf == evf_in_place_addrs[i]) return 1;
    return 0;
}

int evf_f_status_ignored(const MPI_Fint *status)
{
    for (int i = 0; i < evf_n_status_ignore; i++)
        if ((const void *)status == evf_status_ignore_addrs[i]) return 1;
    return 0;
}
