/* What this kvio is: its version, the git commit it was built from
 * (build_info.c, written at every build), the build type, the optional
 * parts built in and the versions of the libraries it uses. */
#include "kvio/sysinfo.h"

#include <stdio.h>
#include <string.h>
#include <xxhash.h>
#include <yaml.h>

#ifdef KVIO_HAVE_UCX
#include <ucp/api/ucp.h>
#endif
#ifdef KVIO_HAVE_MPI
#include <mpi.h>
#endif
#ifdef KVIO_HAVE_REDIS
#include <hiredis/hiredis.h>
#endif
#ifdef KVIO_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

#ifndef KVIO_BUILD_TYPE
#define KVIO_BUILD_TYPE "unspecified"
#endif

extern const char kvio_build_commit[];

/* One optional part: its library's version, or NULL when not built in. */
static void part_versions(const char **ucx_p, char *mpi, size_t mpi_len, char *redis,
                          size_t redis_len, char *cuda, size_t cuda_len)
{
    *ucx_p = NULL;
    mpi[0] = redis[0] = cuda[0] = '\0';
#ifdef KVIO_HAVE_UCX
    *ucx_p = ucp_get_version_string();
#endif
#ifdef KVIO_HAVE_MPI
    char library[MPI_MAX_LIBRARY_VERSION_STRING];
    int length = 0;
    if (MPI_Get_library_version(library, &length) == MPI_SUCCESS)
        snprintf(mpi, mpi_len, "%.*s", (int)strcspn(library, ",\n"), library);
#else
    (void)mpi_len;
#endif
#ifdef KVIO_HAVE_REDIS
    snprintf(redis, redis_len, "hiredis %d.%d.%d", HIREDIS_MAJOR, HIREDIS_MINOR, HIREDIS_PATCH);
#else
    (void)redis_len;
#endif
#ifdef KVIO_HAVE_CUDA
    snprintf(cuda, cuda_len, "CUDA runtime %d.%d", CUDART_VERSION / 1000,
             CUDART_VERSION % 1000 / 10);
#else
    (void)cuda_len;
#endif
}

json_t *kvio_build_json(void)
{
    const char *ucx;
    char mpi[128], redis[64], cuda[64], xxhash[32];
    part_versions(&ucx, mpi, sizeof(mpi), redis, sizeof(redis), cuda, sizeof(cuda));
    unsigned number = XXH_versionNumber();
    snprintf(xxhash, sizeof(xxhash), "%u.%u.%u", number / 10000, number / 100 % 100,
             number % 100);
    json_t *libraries = json_pack("{s:s, s:s, s:s}", "libyaml", yaml_get_version_string(),
                                  "jansson", JANSSON_VERSION, "xxhash", xxhash);
    if (ucx != NULL)
        json_object_set_new(libraries, "ucx", json_string(ucx));
    if (mpi[0] != '\0')
        json_object_set_new(libraries, "mpi", json_string(mpi));
    if (redis[0] != '\0')
        json_object_set_new(libraries, "hiredis", json_string(redis));
    if (cuda[0] != '\0')
        json_object_set_new(libraries, "cuda", json_string(cuda));
    json_t *parts = json_pack("{s:b, s:b, s:b, s:b}", "ucx", ucx != NULL, "mpi", mpi[0] != '\0',
                              "redis", redis[0] != '\0', "cuda", cuda[0] != '\0');
    return json_pack("{s:s, s:s, s:s, s:o, s:o}", "kvio_version", KVIO_VERSION, "commit",
                     kvio_build_commit, "build_type", KVIO_BUILD_TYPE, "parts", parts,
                     "libraries", libraries);
}

void kvio_build_describe(char *text_p, size_t text_len)
{
    const char *ucx;
    char mpi[128], redis[64], cuda[64];
    part_versions(&ucx, mpi, sizeof(mpi), redis, sizeof(redis), cuda, sizeof(cuda));
    snprintf(text_p, text_len,
             "kvio %s (commit %s, %s)\n  ucx: %s\n  mpi: %s\n  redis: %s\n  cuda: %s\n"
             "  libyaml %s, jansson %s\n",
             KVIO_VERSION, kvio_build_commit, KVIO_BUILD_TYPE, ucx != NULL ? ucx : "not built",
             mpi[0] != '\0' ? mpi : "not built", redis[0] != '\0' ? redis : "not built",
             cuda[0] != '\0' ? cuda : "not built (no nvcc at configure)",
             yaml_get_version_string(), JANSSON_VERSION);
}
