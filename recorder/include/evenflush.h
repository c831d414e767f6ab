/* evenflush user API: annotate a traced program with named records and regions.
 *
 * The functions are exported by the evenflush preload libraries (libevenflush_openmpi.so,
 * libevenflush_mpich.so). Calls made outside MPI_Init..MPI_Finalize are ignored.
 *
 * To run unchanged without the library, look the functions up at run time instead of linking:
 *
 *     #include <dlfcn.h>
 *     #include "evenflush.h"
 *     evenflush_record_fn rec = (evenflush_record_fn)dlsym(RTLD_DEFAULT, "evenflush_record");
 *     if (rec) rec("iteration", &i, sizeof i);
 *
 * Names become string ids in the trace (one definition per distinct name); payloads are copied.
 */
#ifndef EVENFLUSH_H
#define EVENFLUSH_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Records `len` bytes at `data` (copied) under `name`, with the current time. */
void evenflush_record(const char *name, const void *data, size_t len);

/* Marks the beginning and end of a named region (regions may nest). */
void evenflush_region_begin(const char *name);
void evenflush_region_end(const char *name);

typedef void (*evenflush_record_fn)(const char *name, const void *data, size_t len);
typedef void (*evenflush_region_fn)(const char *name);

#ifdef __cplusplus
}
#endif

#endif
