/*
 * An ABI-level stand-in for libnvidia-ml.so.1, for tests and benchmarks.
 *
 * Compiled against NVIDIA's own nvml.h (the nvidia-nvml-dev wheel), so every
 * struct, version macro and return code is the driver's, and loaded by the
 * real pynvml bindings through LD_LIBRARY_PATH.  What the GPUs report comes
 * from a small text file named by FAKE_NVML_CONFIG (format: see
 * tests/fakes/nvml_abi/__init__.py, which writes it).
 *
 * Build variants (preprocessor flags):
 *   FAKE_NVML_OLD_DRIVER     no nvmlDeviceGetMemoryInfo_v2, no *_v3 process
 *                            lists or detail list, no nvmlDeviceGetTemperatureV
 *                            (r470-era);
 *   FAKE_NVML_NO_DEPRECATED  no nvmlDeviceGetTemperature (removed after its
 *                            deprecation in NVML 13).
 *
 * Extra symbols for the tests: fakeNvmlReload() re-reads the config,
 * fakeNvmlCounts() writes "name count" lines, fakeNvmlResetCounts() zeroes
 * them.  If FAKE_NVML_COUNTS names a file, the counts are written there when
 * the library is unloaded (process exit).
 *
 * Every NVML entry point counts one call and, when latency_us is set, spins
 * for that long (a driver call is an ioctl: CPU time, not sleep).
 *
 * Per-process allocation files: a "procdir PATH" config line names a
 * directory in which every regular file whose name is all digits is a
 * process (pid = the name) with one "gpu=N mem=BYTES [sm=P] [lists=...]" line
 * per GPU it holds memory on.  Each file's mem is added to that GPU's used
 * (the config's used is then the memory no such file holds), so device and
 * per-process figures stay consistent when a process frees memory.  Files
 * are written by other processes (temp ".name", then rename): names that are
 * not all digits are ignored, a file that vanishes mid-read is ignored, and a
 * malformed one is skipped with a line on stderr.
 *
 * Live mode (FAKE_NVML_LIVE=1): every counted entry point stats the config
 * file and the procdir (at most once per millisecond) and re-reads both when
 * either changed (mtime, size, inode; a directory's mtime changes on every
 * rename or unlink in it).  A change within one tick of the kernel's coarse
 * file clock cannot be told apart by mtime, so a read that happened close to
 * the last change is repeated once the clock has moved on.  A re-read also
 * resets the "after" counters of injected errors.  A read fills a second
 * copy of the state and then publishes it, so a call in another thread sees
 * either the old config or the new one, never half of one.  Without
 * FAKE_NVML_LIVE the config is read once, at nvmlInit (or by fakeNvmlReload).
 */
#define NVML_NO_UNVERSIONED_FUNC_DEFS
#define _GNU_SOURCE
#include <nvml.h>

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#define MAX_GPUS 64
#define MAX_MIG 8
#define MAX_PROCS 8192
#define MAX_ERRORS 512
#define MAX_COUNTERS 256
#define NO_ID 0xFFFFFFFFu

struct nvmlDevice_st {
    int gpu;
    int slot; /* -1: the physical GPU, else the MIG slot */
};

typedef struct {
    int present;
    char name[96];
    char uuid[96];
    unsigned long long total, used, reserved, free;
    int has_free;
    int util_gpu, util_mem, temp, fan; /* -1: not supported */
    long long power_mw, power_limit_mw; /* -1: not supported */
    int mig_mode;
    unsigned max_mig;
    unsigned gi, ci; /* MIG instances only */
} fake_dev_t;

typedef struct {
    int gpu;
    unsigned pid;
    unsigned long long mem;
    int mem_na;
    int lists; /* bit 1: compute list, bit 2: graphics list */
    int sm, mem_util; /* -1: no utilisation samples */
    unsigned long long sm_stamp; /* 0: a fresh sample each call; else this old one, always */
    unsigned gi, ci;
} fake_proc_t;

enum group {
    G_DEVICE_ANY, G_NAME, G_UUID, G_MEMORY, G_UTILIZATION, G_TEMPERATURE, G_POWER,
    G_POWER_LIMIT, G_PROCESSES, G_PROCESS_UTILIZATION, G_MIG, G_HANDLE, G_EXTRA, G_COUNT,
    G_INIT, G_DRIVER, G_NGROUPS
};

static const char *group_names[G_NGROUPS] = {
    "all", "name", "uuid", "memory", "utilization", "temperature", "power",
    "power_limit", "processes", "process_utilization", "mig", "handle", "extra", "count",
    "init", "driver_version",
};

typedef struct {
    int gpu;  /* -1: any */
    int slot; /* -1: the physical GPU (and, for "all", its MIG devices) */
    int group;
    nvmlReturn_t code;
    unsigned long long after, seen;
} fake_error_t;

/* Everything a config describes.  Two buffers: a (re-)read fills the one not
 * in use and then publishes it, so a call in another thread never sees half
 * a config; each entry point takes the published pointer once, as a local
 * named "state" (the field macros below read through it). */
typedef struct {
    fake_dev_t s_gpus[MAX_GPUS];
    fake_dev_t s_migs[MAX_GPUS][MAX_MIG];
    unsigned s_gpu_count;
    fake_proc_t s_procs[MAX_PROCS];
    unsigned s_proc_count;
    fake_error_t s_errors[MAX_ERRORS];
    unsigned s_error_count;
    char s_driver_version[80];
    char s_nvml_version[80];
    int s_cuda_version;
    long s_latency_ns;
    char s_procdir[4096]; /* "": no allocation files */
} fake_state_t;

static fake_state_t state_buffers[2];
static fake_state_t *published_state = &state_buffers[0];

static fake_state_t *current_state(void)
{
    return __atomic_load_n(&published_state, __ATOMIC_ACQUIRE);
}

#define gpus (state->s_gpus)
#define migs (state->s_migs)
#define gpu_count (state->s_gpu_count)
#define procs (state->s_procs)
#define proc_count (state->s_proc_count)
#define errors (state->s_errors)
#define error_count (state->s_error_count)
#define driver_version (state->s_driver_version)
#define nvml_version (state->s_nvml_version)
#define cuda_version (state->s_cuda_version)
#define latency_ns (state->s_latency_ns)
#define procdir (state->s_procdir)

/* Handles are the same whichever buffer is published. */
static struct nvmlDevice_st gpu_handles[MAX_GPUS];
static struct nvmlDevice_st mig_handles[MAX_GPUS][MAX_MIG];

static int init_refs;

static void live_poll(void);
static int live_mode = -1; /* -1: FAKE_NVML_LIVE not read yet */

static struct {
    const char *name;
    unsigned long long count;
} counters[MAX_COUNTERS];
static int counter_count;

/* ------------------------------------------------------------ bookkeeping */

static void spin(const fake_state_t *state)
{
    struct timespec start, now;
    if (latency_ns <= 0)
        return;
    clock_gettime(CLOCK_MONOTONIC, &start);
    do {
        clock_gettime(CLOCK_MONOTONIC, &now);
    } while ((now.tv_sec - start.tv_sec) * 1000000000L + (now.tv_nsec - start.tv_nsec) < latency_ns);
}

/* Counts the call, follows the files in live mode, spins; the config to answer from. */
static fake_state_t *count_call(const char *name, int *slot)
{
    fake_state_t *state;
    if (*slot < 0) {
        int i;
        for (i = 0; i < counter_count; i++)
            if (strcmp(counters[i].name, name) == 0)
                break;
        if (i == counter_count) {
            if (counter_count == MAX_COUNTERS)
                return current_state();
            counters[counter_count].name = name;
            counter_count++;
        }
        *slot = i;
    }
    __atomic_fetch_add(&counters[*slot].count, 1, __ATOMIC_RELAXED);
    if (live_mode != 0)
        live_poll();
    state = current_state();
    spin(state);
    return state;
}

#define ENTER()                                                \
    static int counter_slot_ = -1;                             \
    fake_state_t *state = count_call(__func__, &counter_slot_); \
    (void)state;                                               \
    if (init_refs <= 0)                                        \
        return NVML_ERROR_UNINITIALIZED

/* The error configured for this call, or NVML_SUCCESS. */
static nvmlReturn_t injected(fake_state_t *state, int gpu, int slot, int group)
{
    nvmlReturn_t result = NVML_SUCCESS;
    for (unsigned i = 0; i < error_count; i++) {
        fake_error_t *e = &errors[i];
        if (e->gpu >= 0 && e->gpu != gpu)
            continue;
        if (e->group == G_DEVICE_ANY) {
            if (e->slot >= 0 && e->slot != slot)
                continue;
        } else if (e->group != group || e->slot != slot) {
            continue;
        }
        e->seen++;
        if (e->seen > e->after && result == NVML_SUCCESS)
            result = e->code;
    }
    return result;
}

static fake_dev_t *device(fake_state_t *state, nvmlDevice_t handle)
{
    if (handle == NULL || handle->gpu < 0 || (unsigned)handle->gpu >= gpu_count)
        return NULL;
    if (handle->slot < 0)
        return &gpus[handle->gpu];
    if (handle->slot >= MAX_MIG || !migs[handle->gpu][handle->slot].present)
        return NULL;
    return &migs[handle->gpu][handle->slot];
}

/* Resolve a handle and apply injected errors: the preamble of a device call. */
#define DEVICE_CALL(handle, group, dev)                          \
    ENTER();                                                     \
    fake_dev_t *dev = device(state, handle);                     \
    if (dev == NULL)                                             \
        return NVML_ERROR_INVALID_ARGUMENT;                      \
    {                                                            \
        nvmlReturn_t injected_ = injected(state, (handle)->gpu, (handle)->slot, group); \
        if (injected_ != NVML_SUCCESS)                           \
            return injected_;                                    \
    }

static int is_mig(nvmlDevice_t handle) { return handle->slot >= 0; }

/* A figure of the physical GPU: MIG devices and unset figures (< 0) answer
 * NOT_SUPPORTED, as a driver does. */
static nvmlReturn_t gpu_figure(nvmlDevice_t handle, long long value, unsigned int *out)
{
    if (out == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (is_mig(handle) || value < 0)
        return NVML_ERROR_NOT_SUPPORTED;
    *out = (unsigned)value;
    return NVML_SUCCESS;
}

static nvmlReturn_t copy_string(const char *value, char *out, unsigned int length)
{
    if (out == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (strlen(value) + 1 > length)
        return NVML_ERROR_INSUFFICIENT_SIZE;
    strcpy(out, value);
    return NVML_SUCCESS;
}

/* ----------------------------------------------------------------- config */

static nvmlReturn_t parse_code(const char *text)
{
    static const struct { const char *name; nvmlReturn_t code; } names[] = {
        {"NOT_SUPPORTED", NVML_ERROR_NOT_SUPPORTED}, {"NO_PERMISSION", NVML_ERROR_NO_PERMISSION},
        {"GPU_IS_LOST", NVML_ERROR_GPU_IS_LOST}, {"UNKNOWN", NVML_ERROR_UNKNOWN},
        {"NOT_FOUND", NVML_ERROR_NOT_FOUND}, {"DRIVER_NOT_LOADED", NVML_ERROR_DRIVER_NOT_LOADED},
        {"UNINITIALIZED", NVML_ERROR_UNINITIALIZED}, {"TIMEOUT", NVML_ERROR_TIMEOUT},
        {"LIB_RM_VERSION_MISMATCH", NVML_ERROR_LIB_RM_VERSION_MISMATCH},
        {"INSUFFICIENT_SIZE", NVML_ERROR_INSUFFICIENT_SIZE},
        {"FUNCTION_NOT_FOUND", NVML_ERROR_FUNCTION_NOT_FOUND},
        {"INVALID_ARGUMENT", NVML_ERROR_INVALID_ARGUMENT}, {"IRQ_ISSUE", NVML_ERROR_IRQ_ISSUE},
        {"CORRUPTED_INFOROM", NVML_ERROR_CORRUPTED_INFOROM},
        {"RESET_REQUIRED", NVML_ERROR_RESET_REQUIRED},
        {"ARGUMENT_VERSION_MISMATCH", NVML_ERROR_ARGUMENT_VERSION_MISMATCH},
    };
    char *end;
    long code;
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        if (strcmp(text, names[i].name) == 0)
            return names[i].code;
    code = strtol(text, &end, 10);
    return (*text && !*end && code > 0) ? (nvmlReturn_t)code : NVML_SUCCESS; /* SUCCESS: rejected */
}

/* Next key=value (value optionally in double quotes) from *cursor. */
static int next_pair(char **cursor, char **key, char **value)
{
    char *p = *cursor;
    while (*p && isspace((unsigned char)*p))
        p++;
    if (!*p)
        return 0;
    *key = p;
    while (*p && *p != '=' && !isspace((unsigned char)*p))
        p++;
    if (*p != '=')
        return 0;
    *p++ = '\0';
    if (*p == '"') {
        *value = ++p;
        while (*p && *p != '"')
            p++;
    } else {
        *value = p;
        while (*p && !isspace((unsigned char)*p))
            p++;
    }
    if (*p)
        *p++ = '\0';
    *cursor = p;
    return 1;
}

static unsigned long long ull(const char *v) { return strtoull(v, NULL, 10); }

static void device_field(fake_dev_t *d, const char *k, const char *v)
{
    if (!strcmp(k, "name")) snprintf(d->name, sizeof d->name, "%s", v);
    else if (!strcmp(k, "uuid")) snprintf(d->uuid, sizeof d->uuid, "%s", v);
    else if (!strcmp(k, "total")) d->total = ull(v);
    else if (!strcmp(k, "used")) d->used = ull(v);
    else if (!strcmp(k, "reserved")) d->reserved = ull(v);
    else if (!strcmp(k, "free")) { d->free = ull(v); d->has_free = 1; }
    else if (!strcmp(k, "util_gpu")) d->util_gpu = atoi(v);
    else if (!strcmp(k, "util_mem")) d->util_mem = atoi(v);
    else if (!strcmp(k, "temp")) d->temp = atoi(v);
    else if (!strcmp(k, "fan")) d->fan = atoi(v);
    else if (!strcmp(k, "power_mw")) d->power_mw = atoll(v);
    else if (!strcmp(k, "power_limit_mw")) d->power_limit_mw = atoll(v);
    else if (!strcmp(k, "mig_mode")) d->mig_mode = atoi(v);
    else if (!strcmp(k, "max_mig")) d->max_mig = (unsigned)atoi(v);
    else if (!strcmp(k, "gi")) d->gi = (unsigned)atoi(v);
    else if (!strcmp(k, "ci")) d->ci = (unsigned)atoi(v);
}

static void device_defaults(fake_dev_t *d)
{
    memset(d, 0, sizeof *d);
    d->util_gpu = d->util_mem = d->temp = d->fan = -1;
    d->power_mw = d->power_limit_mw = -1;
    d->gi = d->ci = NO_ID;
}

/* A config the fake cannot honour fails loudly (init answers UNKNOWN and the
 * reason goes to stderr): a test must never pass on a line that was ignored. */
static int config_error(const char *path, unsigned line_no, const char *what)
{
    fprintf(stderr, "fake libnvidia-ml: %s line %u: %s\n", path, line_no, what);
    return -2;
}

/* ------------------------------------------------- live files: signatures */

/* What a stat says about a file or directory; a change in any field is a
 * change of its content (files are replaced by rename, never rewritten). */
typedef struct {
    int ok;
    long long mtime_ns;
    long long size;
    unsigned long long ino;
} file_sig_t;

static file_sig_t config_sig, procdir_sig;
static long long loaded_at_ns; /* CLOCK_REALTIME of the latest read */

#define RECHECK_NS 20000000LL /* past any coarse file-clock tick (1-10 ms) */

static long long clock_ns(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static file_sig_t sig_of(const char *path)
{
    file_sig_t sig;
    struct stat st;
    memset(&sig, 0, sizeof sig);
    if (path == NULL || path[0] == '\0' || stat(path, &st) != 0)
        return sig;
    sig.ok = 1;
    sig.mtime_ns = (long long)st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec;
    sig.size = (long long)st.st_size;
    sig.ino = (unsigned long long)st.st_ino;
    return sig;
}

static int same_sig(const file_sig_t *a, const file_sig_t *b)
{
    return a->ok == b->ok && a->mtime_ns == b->mtime_ns && a->size == b->size && a->ino == b->ino;
}

/* ------------------------------------------------- live files: procdir */

static int all_digits(const char *name)
{
    if (!*name)
        return 0;
    for (const char *c = name; *c; c++)
        if (!isdigit((unsigned char)*c))
            return 0;
    return 1;
}

static void procdir_skip(const char *dir, const char *name, unsigned line_no, const char *what)
{
    fprintf(stderr, "fake libnvidia-ml: skipping %s/%s line %u: %s\n", dir, name, line_no, what);
}

/* One allocation file: every line is validated before any is added, so a
 * malformed file adds nothing.  Returns how many processes it added. */
static unsigned load_allocation_file(fake_state_t *state, const char *dir, const char *name)
{
    char path[8192], line[1024];
    fake_proc_t found[MAX_GPUS];
    unsigned count = 0, line_no = 0;
    unsigned pid = (unsigned)strtoul(name, NULL, 10);
    FILE *f;

    snprintf(path, sizeof path, "%s/%s", dir, name);
    if ((f = fopen(path, "r")) == NULL)
        return 0; /* vanished between readdir and open (freed, or replaced) */
    while (fgets(line, sizeof line, f)) {
        char *cursor = line, *key, *value, *end;
        int has_gpu = 0, has_mem = 0, bad = 0;
        fake_proc_t p;
        line_no++;
        while (*cursor && isspace((unsigned char)*cursor))
            cursor++;
        if (*cursor == '\0' || *cursor == '#')
            continue;
        if (count == MAX_GPUS) {
            procdir_skip(dir, name, line_no, "too many lines");
            fclose(f);
            return 0;
        }
        memset(&p, 0, sizeof p);
        p.pid = pid;
        p.lists = 1;
        p.sm = p.mem_util = -1;
        p.gi = p.ci = NO_ID;
        while (!bad && next_pair(&cursor, &key, &value)) {
            errno = 0;
            if (!strcmp(key, "gpu")) {
                long gpu = strtol(value, &end, 10);
                bad = *value == '\0' || *end != '\0' || gpu < 0 || gpu >= (long)gpu_count;
                p.gpu = (int)gpu;
                has_gpu = 1;
            } else if (!strcmp(key, "mem")) {
                p.mem = strtoull(value, &end, 10);
                bad = !isdigit((unsigned char)*value) || *end != '\0' || errno != 0;
                has_mem = 1;
            } else if (!strcmp(key, "sm") || !strcmp(key, "mem_util")) {
                long pct = strtol(value, &end, 10);
                bad = *value == '\0' || *end != '\0' || pct < 0 || pct > 100;
                if (key[0] == 's') p.sm = (int)pct; else p.mem_util = (int)pct;
            } else if (!strcmp(key, "lists")) {
                p.lists = (strstr(value, "compute") ? 1 : 0) | (strstr(value, "graphics") ? 2 : 0)
                          | (strstr(value, "mps") ? 4 : 0);
                bad = p.lists == 0;
            } else if (!strcmp(key, "sm_stamp")) {
                p.sm_stamp = strtoull(value, &end, 10);
                bad = *end != '\0';
            } else if (!strcmp(key, "gi") || !strcmp(key, "ci")) {
                unsigned id = (unsigned)strtoul(value, &end, 10);
                bad = *value == '\0' || *end != '\0';
                if (key[0] == 'g') p.gi = id; else p.ci = id;
            } else {
                bad = 1;
            }
        }
        /* next_pair stops at a word without '=': anything left is malformed */
        while (*cursor && isspace((unsigned char)*cursor))
            cursor++;
        if (bad || *cursor || !has_gpu || !has_mem) {
            procdir_skip(dir, name, line_no,
                         bad || *cursor ? "expected gpu=N mem=BYTES [sm=P] [lists=...]"
                                        : (!has_gpu ? "no gpu=" : "no mem="));
            fclose(f);
            return 0;
        }
        found[count++] = p;
    }
    fclose(f);
    if (proc_count + count > MAX_PROCS) {
        procdir_skip(dir, name, 0, "too many processes");
        return 0;
    }
    for (unsigned i = 0; i < count; i++) {
        procs[proc_count++] = found[i];
        gpus[found[i].gpu].used += found[i].mem;
    }
    return count;
}

static void load_procdir(fake_state_t *state)
{
    DIR *d;
    struct dirent *entry;
    if (procdir[0] == '\0' || (d = opendir(procdir)) == NULL)
        return; /* not there (yet): no process holds memory */
    while ((entry = readdir(d)) != NULL) {
        /* names not all digits: ".", "..", and writers' temporary ".name" files */
        if (!all_digits(entry->d_name))
            continue;
        if (entry->d_type != DT_REG && entry->d_type != DT_UNKNOWN)
            continue;
        load_allocation_file(state, procdir, entry->d_name);
    }
    closedir(d);
}

/* ----------------------------------------------------------------- config */

/* Fills the buffer not in use, then publishes it. */
static int load_config(void)
{
    const char *path = getenv("FAKE_NVML_CONFIG");
    fake_state_t *const previous = current_state();
    fake_state_t *const state = previous == &state_buffers[0] ? &state_buffers[1] : &state_buffers[0];
    FILE *f;
    char line[4096];
    unsigned line_no = 0;
    int status = 0;

    gpu_count = proc_count = error_count = 0;
    latency_ns = 0;
    procdir[0] = '\0';
    memset(migs, 0, sizeof migs);
    /* versions keep their value unless the config sets them */
    if (previous->s_driver_version[0]) {
        memcpy(driver_version, previous->s_driver_version, sizeof driver_version);
        memcpy(nvml_version, previous->s_nvml_version, sizeof nvml_version);
        cuda_version = previous->s_cuda_version;
    } else {
        snprintf(driver_version, sizeof driver_version, "%s", "580.95.05");
        snprintf(nvml_version, sizeof nvml_version, "%s", "13.580.95.05");
        cuda_version = 13000;
    }
    /* stat before reading: a change during the read shows on the next poll */
    loaded_at_ns = clock_ns(CLOCK_REALTIME);
    config_sig = sig_of(path);
    procdir_sig = sig_of(NULL);
    if (path == NULL || (f = fopen(path, "r")) == NULL) {
        __atomic_store_n(&published_state, state, __ATOMIC_RELEASE);
        return -1;
    }
    while (status == 0 && fgets(line, sizeof line, f)) {
        char *cursor = line, *word, *key, *value;
        line_no++;
        while (*cursor && isspace((unsigned char)*cursor))
            cursor++;
        if (*cursor == '#' || *cursor == '\0')
            continue;
        word = cursor;
        while (*cursor && !isspace((unsigned char)*cursor))
            cursor++;
        if (*cursor)
            *cursor++ = '\0';
        if (!strcmp(word, "driver_version") || !strcmp(word, "nvml_version")) {
            char *end;
            while (isspace((unsigned char)*cursor))
                cursor++;
            end = cursor + strcspn(cursor, "\r\n");
            *end = '\0';
            snprintf(word[0] == 'd' ? driver_version : nvml_version, 80, "%s", cursor);
        } else if (!strcmp(word, "procdir")) {
            char *end;
            while (isspace((unsigned char)*cursor))
                cursor++;
            end = cursor + strcspn(cursor, "\r\n");
            *end = '\0';
            if (*cursor == '\0' || end - cursor >= (long)sizeof procdir) {
                status = config_error(path, line_no, "procdir needs a path");
                break;
            }
            snprintf(procdir, sizeof procdir, "%s", cursor);
        } else if (!strcmp(word, "cuda_version")) {
            cuda_version = atoi(cursor);
        } else if (!strcmp(word, "latency_us")) {
            latency_ns = (long)(atof(cursor) * 1000.0);
        } else if (!strcmp(word, "gpu")) {
            if (gpu_count == MAX_GPUS) {
                status = config_error(path, line_no, "too many GPUs");
                break;
            }
            fake_dev_t *d = &gpus[gpu_count];
            device_defaults(d);
            d->present = 1;
            gpu_handles[gpu_count].gpu = (int)gpu_count;
            gpu_handles[gpu_count].slot = -1;
            while (next_pair(&cursor, &key, &value))
                device_field(d, key, value);
            gpu_count++;
        } else if (!strcmp(word, "mig")) {
            fake_dev_t tmp;
            int gpu = -1, slot = -1;
            device_defaults(&tmp);
            while (next_pair(&cursor, &key, &value)) {
                if (!strcmp(key, "gpu")) gpu = atoi(value);
                else if (!strcmp(key, "slot")) slot = atoi(value);
                else device_field(&tmp, key, value);
            }
            if (gpu < 0 || gpu >= MAX_GPUS || slot < 0 || slot >= MAX_MIG) {
                status = config_error(path, line_no, "MIG gpu or slot out of range");
                break;
            }
            tmp.present = 1;
            mig_handles[gpu][slot].gpu = gpu;
            mig_handles[gpu][slot].slot = slot;
            migs[gpu][slot] = tmp;
        } else if (!strcmp(word, "proc")) {
            fake_proc_t *p;
            if (proc_count == MAX_PROCS) {
                status = config_error(path, line_no, "too many processes");
                break;
            }
            p = &procs[proc_count++];
            memset(p, 0, sizeof *p);
            p->lists = 1;
            p->sm = p->mem_util = -1;
            p->gi = p->ci = NO_ID;
            while (next_pair(&cursor, &key, &value)) {
                if (!strcmp(key, "gpu")) p->gpu = atoi(value);
                else if (!strcmp(key, "pid")) p->pid = (unsigned)atoi(value);
                else if (!strcmp(key, "mem")) {
                    if (!strcmp(value, "na")) p->mem_na = 1;
                    else p->mem = ull(value);
                }
                else if (!strcmp(key, "lists")) {
                    p->lists = (strstr(value, "compute") ? 1 : 0) | (strstr(value, "graphics") ? 2 : 0)
                               | (strstr(value, "mps") ? 4 : 0);
                }
                else if (!strcmp(key, "sm")) p->sm = atoi(value);
                else if (!strcmp(key, "mem_util")) p->mem_util = atoi(value);
                else if (!strcmp(key, "sm_stamp")) p->sm_stamp = ull(value);
                else if (!strcmp(key, "gi")) p->gi = (unsigned)atoi(value);
                else if (!strcmp(key, "ci")) p->ci = (unsigned)atoi(value);
            }
        } else if (!strcmp(word, "error")) {
            fake_error_t *e;
            int group = -1;
            if (error_count == MAX_ERRORS) {
                status = config_error(path, line_no, "too many errors");
                break;
            }
            e = &errors[error_count++];
            memset(e, 0, sizeof *e);
            e->gpu = e->slot = -1;
            e->code = NVML_SUCCESS;
            while (next_pair(&cursor, &key, &value)) {
                if (!strcmp(key, "gpu")) e->gpu = atoi(value);
                else if (!strcmp(key, "mig")) e->slot = atoi(value);
                else if (!strcmp(key, "code")) e->code = parse_code(value);
                else if (!strcmp(key, "after")) e->after = ull(value);
                else if (!strcmp(key, "fn")) {
                    for (int g = 0; g < G_NGROUPS; g++)
                        if (!strcmp(value, group_names[g]))
                            group = g;
                }
            }
            if (group < 0 || e->code == NVML_SUCCESS) {
                status = config_error(path, line_no, "error needs a known fn= and code=");
                break;
            }
            e->group = group;
        } else {
            status = config_error(path, line_no, "unknown line");
            break;
        }
    }
    fclose(f);
    if (status == 0 && procdir[0]) {
        procdir_sig = sig_of(procdir);
        load_procdir(state);
    }
    __atomic_store_n(&published_state, state, __ATOMIC_RELEASE);
    return status;
}

/* ------------------------------------------------------------- live mode */

/* Re-read the config and the procdir when either changed.  A read that came
 * soon after the newest change it saw is repeated once the file clock has
 * surely moved on: a second rename in the same coarse tick leaves the
 * directory's mtime as it was. */
static void live_poll(void)
{
    static long long last_poll_ns;
    static int busy;
    fake_state_t *state = current_state();
    long long now, newest;
    file_sig_t cfg, dir;

    if (live_mode < 0) {
        const char *value = getenv("FAKE_NVML_LIVE");
        live_mode = value != NULL && strcmp(value, "1") == 0;
        if (!live_mode)
            return;
    }
    if (init_refs <= 0)
        return; /* nvmlInit reads everything */
    now = clock_ns(CLOCK_MONOTONIC);
    if (now - last_poll_ns < 1000000LL)
        return;
    if (__atomic_exchange_n(&busy, 1, __ATOMIC_ACQUIRE))
        return; /* another thread is polling */
    last_poll_ns = now;
    cfg = sig_of(getenv("FAKE_NVML_CONFIG"));
    dir = sig_of(procdir);
    newest = config_sig.mtime_ns > procdir_sig.mtime_ns ? config_sig.mtime_ns : procdir_sig.mtime_ns;
    if (!same_sig(&cfg, &config_sig) || !same_sig(&dir, &procdir_sig)
            || (loaded_at_ns < newest + RECHECK_NS && clock_ns(CLOCK_REALTIME) >= newest + RECHECK_NS)) {
        if (load_config() != 0)
            fprintf(stderr, "fake libnvidia-ml: live re-read of the config failed\n");
    }
    __atomic_store_n(&busy, 0, __ATOMIC_RELEASE);
}

/* Library-wide errors (init, count, driver version) come from gpu-less entries. */
static nvmlReturn_t injected_global(fake_state_t *state, int group)
{
    nvmlReturn_t result = NVML_SUCCESS;
    for (unsigned i = 0; i < error_count; i++) {
        fake_error_t *e = &errors[i];
        if (e->group != group)
            continue;
        e->seen++;
        if (e->seen > e->after && result == NVML_SUCCESS)
            result = e->code;
    }
    return result;
}

/* ------------------------------------------------------- test-only symbols */

int fakeNvmlReload(void) { return load_config(); }

void fakeNvmlResetCounts(void)
{
    for (int i = 0; i < counter_count; i++)
        counters[i].count = 0;
}

int fakeNvmlCounts(char *out, unsigned int length)
{
    size_t used = 0;
    if (out == NULL || length == 0)
        return -1;
    out[0] = '\0';
    for (int i = 0; i < counter_count; i++) {
        int n = snprintf(out + used, length - used, "%s %llu\n", counters[i].name, counters[i].count);
        if (n < 0 || (size_t)n >= length - used)
            return -1;
        used += (size_t)n;
    }
    return (int)used;
}

__attribute__((destructor)) static void write_counts(void)
{
    const char *path = getenv("FAKE_NVML_COUNTS");
    FILE *f;
    if (path == NULL || (f = fopen(path, "w")) == NULL)
        return;
    for (int i = 0; i < counter_count; i++)
        fprintf(f, "%s %llu\n", counters[i].name, counters[i].count);
    fclose(f);
}

/* ------------------------------------------------------------------- init */

static nvmlReturn_t do_init(void)
{
    nvmlReturn_t code;
    if (init_refs == 0) {
        int status = load_config();
        if (status == -1)
            return NVML_ERROR_DRIVER_NOT_LOADED; /* no config: as if no driver */
        if (status != 0)
            return NVML_ERROR_UNKNOWN;
    }
    code = injected_global(current_state(), G_INIT);
    if (code != NVML_SUCCESS)
        return code;
    init_refs++;
    return NVML_SUCCESS;
}

#define INIT_ENTRY(name, params)                     \
    nvmlReturn_t name params                          \
    {                                                 \
        static int counter_slot_ = -1;                \
        count_call(__func__, &counter_slot_);         \
        return do_init();                             \
    }

INIT_ENTRY(nvmlInit, (void))
INIT_ENTRY(nvmlInit_v2, (void))
nvmlReturn_t nvmlInitWithFlags(unsigned int flags)
{
    static int counter_slot_ = -1;
    (void)flags;
    count_call(__func__, &counter_slot_);
    return do_init();
}

nvmlReturn_t nvmlShutdown(void)
{
    ENTER();
    init_refs--;
    return NVML_SUCCESS;
}

const char *nvmlErrorString(nvmlReturn_t result)
{
    switch (result) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_NO_PERMISSION: return "Insufficient Permissions";
    case NVML_ERROR_NOT_FOUND: return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
    case NVML_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
    case NVML_ERROR_TIMEOUT: return "Timeout";
    case NVML_ERROR_FUNCTION_NOT_FOUND: return "Function Not Found";
    case NVML_ERROR_GPU_IS_LOST: return "GPU is lost";
    case NVML_ERROR_LIB_RM_VERSION_MISMATCH: return "RM has detected an NVML/RM version mismatch.";
    case NVML_ERROR_ARGUMENT_VERSION_MISMATCH: return "Argument version mismatch";
    default: return "Unknown Error";
    }
}

/* ----------------------------------------------------------------- system */

nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length)
{
    ENTER();
    nvmlReturn_t code = injected_global(state, G_DRIVER);
    if (code != NVML_SUCCESS)
        return code;
    return copy_string(driver_version, version, length);
}

nvmlReturn_t nvmlSystemGetNVMLVersion(char *version, unsigned int length)
{
    ENTER();
    return copy_string(nvml_version, version, length);
}

nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *version)
{
    ENTER();
    if (version == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    *version = cuda_version;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *version)
{
    ENTER();
    if (version == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    *version = cuda_version;
    return NVML_SUCCESS;
}

static nvmlReturn_t get_count(fake_state_t *state, unsigned int *count)
{
    nvmlReturn_t code = injected_global(state, G_COUNT);
    if (code != NVML_SUCCESS)
        return code;
    if (count == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    *count = gpu_count;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetCount(unsigned int *count) { ENTER(); return get_count(state, count); }
nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count) { ENTER(); return get_count(state, count); }

static nvmlReturn_t get_handle(fake_state_t *state, unsigned int index, nvmlDevice_t *out)
{
    nvmlReturn_t code;
    if (out == NULL || index >= gpu_count)
        return NVML_ERROR_INVALID_ARGUMENT;
    code = injected(state, (int)index, -1, G_HANDLE);
    if (code != NVML_SUCCESS)
        return code;
    *out = &gpu_handles[index];
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t *device_out)
{
    ENTER();
    return get_handle(state, index, device_out);
}

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device_out)
{
    ENTER();
    return get_handle(state, index, device_out);
}

/* --------------------------------------------------------- static fields */

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t handle, char *name, unsigned int length)
{
    DEVICE_CALL(handle, G_NAME, dev);
    return copy_string(dev->name, name, length);
}

nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t handle, char *uuid, unsigned int length)
{
    DEVICE_CALL(handle, G_UUID, dev);
    return copy_string(dev->uuid, uuid, length);
}

nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t handle, unsigned int *index)
{
    DEVICE_CALL(handle, G_EXTRA, dev);
    (void)dev;
    if (index == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    *index = (unsigned)handle->gpu;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetEnforcedPowerLimit(nvmlDevice_t handle, unsigned int *limit)
{
    DEVICE_CALL(handle, G_POWER_LIMIT, dev);
    return gpu_figure(handle, dev->power_limit_mw, limit);
}

nvmlReturn_t nvmlDeviceGetPowerManagementLimit(nvmlDevice_t handle, unsigned int *limit)
{
    DEVICE_CALL(handle, G_POWER_LIMIT, dev);
    return gpu_figure(handle, dev->power_limit_mw, limit);
}

/* ----------------------------------------------------------------- memory */

static unsigned long long free_of(const fake_dev_t *dev)
{
    if (dev->has_free)
        return dev->free;
    return dev->total - dev->used - dev->reserved;
}

/* v1 folds driver-reserved memory into "used", as real drivers do. */
nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t handle, nvmlMemory_t *memory)
{
    DEVICE_CALL(handle, G_MEMORY, dev);
    if (memory == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    memory->total = dev->total;
    memory->free = free_of(dev);
    memory->used = dev->used + dev->reserved;
    return NVML_SUCCESS;
}

#ifndef FAKE_NVML_OLD_DRIVER
nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t handle, nvmlMemory_v2_t *memory)
{
    DEVICE_CALL(handle, G_MEMORY, dev);
    if (memory == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (memory->version != nvmlMemory_v2)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    memory->total = dev->total;
    memory->reserved = dev->reserved;
    memory->free = free_of(dev);
    memory->used = dev->used;
    return NVML_SUCCESS;
}
#endif

/* --------------------------------------------------- utilisation & sensors */

nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t handle, nvmlUtilization_t *utilization)
{
    DEVICE_CALL(handle, G_UTILIZATION, dev);
    if (utilization == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (is_mig(handle) || dev->util_gpu < 0)
        return NVML_ERROR_NOT_SUPPORTED;
    utilization->gpu = (unsigned)dev->util_gpu;
    utilization->memory = (unsigned)(dev->util_mem < 0 ? 0 : dev->util_mem);
    return NVML_SUCCESS;
}

static nvmlReturn_t read_temperature(nvmlDevice_t handle, const fake_dev_t *dev,
                                     nvmlTemperatureSensors_t sensor, unsigned int *temp)
{
    if (temp == NULL || sensor != NVML_TEMPERATURE_GPU)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (is_mig(handle) || dev->temp < 0)
        return NVML_ERROR_NOT_SUPPORTED;
    *temp = (unsigned)dev->temp;
    return NVML_SUCCESS;
}

#ifndef FAKE_NVML_NO_DEPRECATED
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t handle, nvmlTemperatureSensors_t sensor,
                                      unsigned int *temp)
{
    DEVICE_CALL(handle, G_TEMPERATURE, dev);
    return read_temperature(handle, dev, sensor, temp);
}
#pragma GCC diagnostic pop
#endif

#ifndef FAKE_NVML_OLD_DRIVER
nvmlReturn_t nvmlDeviceGetTemperatureV(nvmlDevice_t handle, nvmlTemperature_t *temperature)
{
    DEVICE_CALL(handle, G_TEMPERATURE, dev);
    if (temperature == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (temperature->version != nvmlTemperature_v1)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    unsigned int value = 0;
    nvmlReturn_t code = read_temperature(handle, dev, temperature->sensorType, &value);
    if (code == NVML_SUCCESS)
        temperature->temperature = (int)value;
    return code;
}
#endif

nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t handle, unsigned int *power)
{
    DEVICE_CALL(handle, G_POWER, dev);
    return gpu_figure(handle, dev->power_mw, power);
}

nvmlReturn_t nvmlDeviceGetFanSpeed(nvmlDevice_t handle, unsigned int *speed)
{
    DEVICE_CALL(handle, G_EXTRA, dev);
    return gpu_figure(handle, dev->fan, speed);
}

/* -------------------------------------------------------------- processes */

/* Whether process p runs on the device behind handle (MIG: in its instance). */
static int on_device(const fake_proc_t *p, nvmlDevice_t handle, const fake_dev_t *dev)
{
    if (p->gpu != handle->gpu)
        return 0;
    return !is_mig(handle) || p->gi == dev->gi;
}

/* The NVML contract shared by every process-list version: with too small a
 * buffer (or none), report the count needed and INSUFFICIENT_SIZE; with no
 * process, count 0 and SUCCESS. */
#define PROCESS_LIST(handle, count, infos, bit, fill)                        \
    do {                                                                     \
        unsigned needed = 0, n = 0;                                          \
        if (count == NULL)                                                   \
            return NVML_ERROR_INVALID_ARGUMENT;                              \
        for (unsigned i = 0; i < proc_count; i++)                            \
            if ((procs[i].lists & (bit)) && on_device(&procs[i], handle, dev)) \
                needed++;                                                    \
        if (needed == 0) {                                                   \
            *count = 0;                                                      \
            return NVML_SUCCESS;                                             \
        }                                                                    \
        if (infos == NULL || *count < needed) {                              \
            *count = needed;                                                 \
            return NVML_ERROR_INSUFFICIENT_SIZE;                             \
        }                                                                    \
        for (unsigned i = 0; i < proc_count; i++) {                          \
            const fake_proc_t *p = &procs[i];                                \
            if (!(p->lists & (bit)) || !on_device(p, handle, dev))           \
                continue;                                                    \
            infos[n].pid = p->pid;                                           \
            infos[n].usedGpuMemory = p->mem_na ? NVML_VALUE_NOT_AVAILABLE : p->mem; \
            fill;                                                            \
            n++;                                                             \
        }                                                                    \
        *count = n;                                                          \
        return NVML_SUCCESS;                                                 \
    } while (0)

#define FILL_IDS (infos[n].gpuInstanceId = p->gi, infos[n].computeInstanceId = p->ci)

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t handle, unsigned int *count,
                                                  nvmlProcessInfo_v1_t *infos)
{
    DEVICE_CALL(handle, G_PROCESSES, dev);
    PROCESS_LIST(handle, count, infos, 1, (void)0);
}

nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses(nvmlDevice_t handle, unsigned int *count,
                                                   nvmlProcessInfo_v1_t *infos)
{
    DEVICE_CALL(handle, G_PROCESSES, dev);
    PROCESS_LIST(handle, count, infos, 2, (void)0);
}

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t handle, unsigned int *count,
                                                     nvmlProcessInfo_v2_t *infos)
{
    DEVICE_CALL(handle, G_PROCESSES, dev);
    PROCESS_LIST(handle, count, infos, 1, FILL_IDS);
}

nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v2(nvmlDevice_t handle, unsigned int *count,
                                                      nvmlProcessInfo_v2_t *infos)
{
    DEVICE_CALL(handle, G_PROCESSES, dev);
    PROCESS_LIST(handle, count, infos, 2, FILL_IDS);
}

#ifndef FAKE_NVML_OLD_DRIVER
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t handle, unsigned int *count,
                                                     nvmlProcessInfo_t *infos)
{
    DEVICE_CALL(handle, G_PROCESSES, dev);
    PROCESS_LIST(handle, count, infos, 1, FILL_IDS);
}

nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v3(nvmlDevice_t handle, unsigned int *count,
                                                      nvmlProcessInfo_t *infos)
{
    DEVICE_CALL(handle, G_PROCESSES, dev);
    PROCESS_LIST(handle, count, infos, 2, FILL_IDS);
}
#endif

/* MPS clients: listed with lists=mps (bit 4); none by default. */
nvmlReturn_t nvmlDeviceGetMPSComputeRunningProcesses(nvmlDevice_t handle, unsigned int *count,
                                                     nvmlProcessInfo_v1_t *infos)
{
    DEVICE_CALL(handle, G_PROCESSES, dev);
    PROCESS_LIST(handle, count, infos, 4, (void)0);
}

nvmlReturn_t nvmlDeviceGetMPSComputeRunningProcesses_v2(nvmlDevice_t handle, unsigned int *count,
                                                        nvmlProcessInfo_v2_t *infos)
{
    DEVICE_CALL(handle, G_PROCESSES, dev);
    PROCESS_LIST(handle, count, infos, 4, FILL_IDS);
}

#ifndef FAKE_NVML_OLD_DRIVER
nvmlReturn_t nvmlDeviceGetMPSComputeRunningProcesses_v3(nvmlDevice_t handle, unsigned int *count,
                                                        nvmlProcessInfo_t *infos)
{
    DEVICE_CALL(handle, G_PROCESSES, dev);
    PROCESS_LIST(handle, count, infos, 4, FILL_IDS);
}

/* The list API of newer drivers: one struct, a mode instead of three symbols. */
nvmlReturn_t nvmlDeviceGetRunningProcessDetailList(nvmlDevice_t handle, nvmlProcessDetailList_t *plist)
{
    static const int bits[] = {1, 2, 4, 7};
    unsigned *count;
    nvmlProcessDetail_v1_t *infos;

    DEVICE_CALL(handle, G_PROCESSES, dev);
    if (plist == NULL || plist->mode >= NVML_PROCESS_MODE_MAX)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (plist->version != nvmlProcessDetailList_v1)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    count = &plist->numProcArrayEntries;
    infos = plist->procArray;
    PROCESS_LIST(handle, count, infos, bits[plist->mode],
                 (FILL_IDS, infos[n].usedGpuCcProtectedMemory = 0));
}
#endif

/* Samples newer than lastSeen; every process with an sm value has one taken
 * "now" (CLOCK_REALTIME µs), as a driver does for a process running kernels.
 * A process with sm_stamp set instead repeats that old sample on every call,
 * whatever lastSeen says, as some drivers do for a process gone idle. */
nvmlReturn_t nvmlDeviceGetProcessUtilization(nvmlDevice_t handle,
                                             nvmlProcessUtilizationSample_t *utilization,
                                             unsigned int *count, unsigned long long lastSeen)
{
    struct timespec now;
    unsigned long long stamp;
    unsigned needed = 0, n = 0;

    DEVICE_CALL(handle, G_PROCESS_UTILIZATION, dev);
    if (count == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (is_mig(handle))
        return NVML_ERROR_NOT_SUPPORTED;
    clock_gettime(CLOCK_REALTIME, &now);
    stamp = (unsigned long long)now.tv_sec * 1000000ULL + (unsigned long long)now.tv_nsec / 1000ULL;
    for (unsigned i = 0; i < proc_count; i++)
        if (procs[i].sm >= 0 && on_device(&procs[i], handle, dev)
                && (procs[i].sm_stamp || stamp > lastSeen))
            needed++;
    if (needed == 0)
        return NVML_ERROR_NOT_FOUND;
    if (utilization == NULL || *count < needed) {
        *count = needed;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    for (unsigned i = 0; i < proc_count; i++) {
        const fake_proc_t *p = &procs[i];
        if (p->sm < 0 || !on_device(p, handle, dev) || !(p->sm_stamp || stamp > lastSeen))
            continue;
        utilization[n].pid = p->pid;
        utilization[n].timeStamp = p->sm_stamp ? p->sm_stamp : stamp;
        utilization[n].smUtil = (unsigned)p->sm;
        utilization[n].memUtil = (unsigned)(p->mem_util < 0 ? 0 : p->mem_util);
        utilization[n].encUtil = 0;
        utilization[n].decUtil = 0;
        n++;
    }
    *count = n;
    return NVML_SUCCESS;
}

/* -------------------------------------------------------------------- MIG */

nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t handle, unsigned int *current, unsigned int *pending)
{
    DEVICE_CALL(handle, G_MIG, dev);
    if (current == NULL || pending == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (is_mig(handle) || dev->max_mig == 0)
        return NVML_ERROR_NOT_SUPPORTED;
    *current = *pending = dev->mig_mode ? NVML_DEVICE_MIG_ENABLE : NVML_DEVICE_MIG_DISABLE;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t handle, unsigned int *count)
{
    DEVICE_CALL(handle, G_MIG, dev);
    if (count == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (is_mig(handle))
        return NVML_ERROR_INVALID_ARGUMENT;
    *count = dev->max_mig;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t handle, unsigned int index,
                                                 nvmlDevice_t *mig)
{
    DEVICE_CALL(handle, G_MIG, dev);
    if (mig == NULL || is_mig(handle) || index >= dev->max_mig)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (!dev->mig_mode || index >= MAX_MIG || !migs[handle->gpu][index].present)
        return NVML_ERROR_NOT_FOUND;
    *mig = &mig_handles[handle->gpu][index];
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceIsMigDeviceHandle(nvmlDevice_t handle, unsigned int *isMig)
{
    DEVICE_CALL(handle, G_MIG, dev);
    (void)dev;
    if (isMig == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    *isMig = is_mig(handle) ? 1 : 0;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t handle, unsigned int *id)
{
    DEVICE_CALL(handle, G_MIG, dev);
    if (id == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (!is_mig(handle))
        return NVML_ERROR_NOT_SUPPORTED;
    *id = dev->gi;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetComputeInstanceId(nvmlDevice_t handle, unsigned int *id)
{
    DEVICE_CALL(handle, G_MIG, dev);
    if (id == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (!is_mig(handle))
        return NVML_ERROR_NOT_SUPPORTED;
    *id = dev->ci;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetDeviceHandleFromMigDeviceHandle(nvmlDevice_t mig, nvmlDevice_t *parent)
{
    DEVICE_CALL(mig, G_MIG, dev);
    (void)dev;
    if (parent == NULL || !is_mig(mig))
        return NVML_ERROR_INVALID_ARGUMENT;
    *parent = &gpu_handles[mig->gpu];
    return NVML_SUCCESS;
}

/* ------------------------------------------ what other monitors also ask */
/* Plausible constant answers, so nvitop and gpustat take their normal path
 * in the benchmarks instead of their missing-function one. */

nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t handle, nvmlPciInfo_t *pci)
{
    DEVICE_CALL(handle, G_EXTRA, dev);
    (void)dev;
    if (pci == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    memset(pci, 0, sizeof *pci);
    pci->bus = 0x18u + (unsigned)handle->gpu;
    pci->pciDeviceId = 0x233010DEu;
    pci->pciSubSystemId = 0x16C110DEu;
    snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, "0000:%02X:00.0", pci->bus);
    snprintf(pci->busId, sizeof pci->busId, "00000000:%02X:00.0", pci->bus);
    return NVML_SUCCESS;
}

static nvmlReturn_t codec_utilization(nvmlDevice_t handle, unsigned int *util, unsigned int *period)
{
    if (util == NULL || period == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (is_mig(handle))
        return NVML_ERROR_NOT_SUPPORTED;
    *util = 0;
    *period = 167000;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetEncoderUtilization(nvmlDevice_t handle, unsigned int *util, unsigned int *period)
{
    DEVICE_CALL(handle, G_EXTRA, dev);
    (void)dev;
    return codec_utilization(handle, util, period);
}

nvmlReturn_t nvmlDeviceGetDecoderUtilization(nvmlDevice_t handle, unsigned int *util, unsigned int *period)
{
    DEVICE_CALL(handle, G_EXTRA, dev);
    (void)dev;
    return codec_utilization(handle, util, period);
}

static nvmlReturn_t clock_of(nvmlClockType_t type, unsigned int *clock, int max)
{
    if (clock == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    switch (type) {
    case NVML_CLOCK_GRAPHICS: case NVML_CLOCK_SM: *clock = max ? 1980 : 1755; break;
    case NVML_CLOCK_MEM: *clock = 2619; break;
    case NVML_CLOCK_VIDEO: *clock = max ? 1545 : 1395; break;
    default: return NVML_ERROR_INVALID_ARGUMENT;
    }
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t handle, nvmlClockType_t type, unsigned int *clock)
{
    DEVICE_CALL(handle, G_EXTRA, dev);
    (void)dev;
    return clock_of(type, clock, 0);
}

nvmlReturn_t nvmlDeviceGetMaxClockInfo(nvmlDevice_t handle, nvmlClockType_t type, unsigned int *clock)
{
    DEVICE_CALL(handle, G_EXTRA, dev);
    (void)dev;
    return clock_of(type, clock, 1);
}

nvmlReturn_t nvmlDeviceGetPcieThroughput(nvmlDevice_t handle, nvmlPcieUtilCounter_t counter, unsigned int *value)
{
    DEVICE_CALL(handle, G_EXTRA, dev);
    (void)dev;
    if (value == NULL || counter >= NVML_PCIE_UTIL_COUNT)
        return NVML_ERROR_INVALID_ARGUMENT;
    *value = counter == NVML_PCIE_UTIL_TX_BYTES ? 1234 : 5678; /* KB/s */
    return NVML_SUCCESS;
}

static nvmlReturn_t enable_state(nvmlEnableState_t *out, nvmlEnableState_t value)
{
    if (out == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    *out = value;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetDisplayActive(nvmlDevice_t handle, nvmlEnableState_t *active)
{
    DEVICE_CALL(handle, G_EXTRA, dev);
    (void)dev;
    return enable_state(active, NVML_FEATURE_DISABLED);
}

nvmlReturn_t nvmlDeviceGetDisplayMode(nvmlDevice_t handle, nvmlEnableState_t *mode)
{
    DEVICE_CALL(handle, G_EXTRA, dev);
    (void)dev;
    return enable_state(mode, NVML_FEATURE_DISABLED);
}

nvmlReturn_t nvmlDeviceGetPersistenceMode(nvmlDevice_t handle, nvmlEnableState_t *mode)
{
    DEVICE_CALL(handle, G_EXTRA, dev);
    (void)dev;
    return enable_state(mode, NVML_FEATURE_ENABLED);
}

/* Windows-only: a Linux driver exports it and answers NOT_SUPPORTED. */
nvmlReturn_t nvmlDeviceGetDriverModel(nvmlDevice_t handle, nvmlDriverModel_t *current, nvmlDriverModel_t *pending)
{
    DEVICE_CALL(handle, G_EXTRA, dev);
    (void)dev; (void)current; (void)pending;
    return NVML_ERROR_NOT_SUPPORTED;
}

nvmlReturn_t nvmlDeviceGetDriverModel_v2(nvmlDevice_t handle, nvmlDriverModel_t *current, nvmlDriverModel_t *pending)
{
    DEVICE_CALL(handle, G_EXTRA, dev);
    (void)dev; (void)current; (void)pending;
    return NVML_ERROR_NOT_SUPPORTED;
}

nvmlReturn_t nvmlDeviceGetPerformanceState(nvmlDevice_t handle, nvmlPstates_t *pstate)
{
    DEVICE_CALL(handle, G_EXTRA, dev);
    (void)dev;
    if (pstate == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    *pstate = NVML_PSTATE_0;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t handle, nvmlMemoryErrorType_t type,
                                         nvmlEccCounterType_t counter, unsigned long long *count)
{
    DEVICE_CALL(handle, G_EXTRA, dev);
    (void)dev; (void)type; (void)counter;
    if (count == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    *count = 0;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetComputeMode(nvmlDevice_t handle, nvmlComputeMode_t *mode)
{
    DEVICE_CALL(handle, G_EXTRA, dev);
    (void)dev;
    if (mode == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    *mode = NVML_COMPUTEMODE_DEFAULT;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t handle, int *major, int *minor)
{
    DEVICE_CALL(handle, G_EXTRA, dev);
    (void)dev;
    if (major == NULL || minor == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    *major = 9;
    *minor = 0;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetConfComputeMemSizeInfo(nvmlDevice_t handle, nvmlConfComputeMemSizeInfo_t *info)
{
    DEVICE_CALL(handle, G_EXTRA, dev);
    (void)dev; (void)info;
    return NVML_ERROR_NOT_SUPPORTED;
}
