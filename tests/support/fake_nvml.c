/* A stand-in for the NVIDIA driver's libnvidia-ml.so.1, for the machines that have no GPU.

   It answers the calls nvidia-ml-py makes for the system sampler, from the file that
   $FAKE_NVML_FIGURES names. Each line is one of:

     gpu UUID UTIL USED_MIB TOTAL_MIB RESERVED_MIB POWER_MW LIMIT_MW TEMP_C SM_MHZ
     proc LOCAL_RANK GPU_INDEX USED_MIB SM_PERCENT

   A "proc" line makes the process that loaded this library, when its $LOCAL_RANK is
   LOCAL_RANK, a compute process of GPU GPU_INDEX holding USED_MIB, with SM_PERCENT of the
   SM time in every utilisation sample. nvmlDeviceGetMemoryInfo (the first version) counts
   the reserved memory as used, as the driver does; the second version does not. */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>

#define MAX_GPUS 8
#define MIB (1024ULL * 1024ULL)

enum { OK = 0, INVALID = 2, NOT_FOUND = 6, INSUFFICIENT = 7, UNKNOWN = 999 };

typedef struct {
    char uuid[96];
    unsigned util, power, limit, temp, clock;
    unsigned long long used, total, reserved;
} Gpu;

typedef struct { unsigned gpu, memory; } Utilization;
typedef struct { unsigned long long total, free, used; } Memory;
typedef struct { unsigned version; unsigned long long total, reserved, free, used; } Memory2;
typedef struct {
    unsigned pid;
    unsigned long long used;
    unsigned gpu_instance, compute_instance;
} ProcessInfo;
typedef struct {
    unsigned pid;
    unsigned long long timestamp;
    unsigned sm, mem, enc, dec;
} ProcessSample;

static Gpu gpus[MAX_GPUS];
static int count = -1;
static int my_gpu = -1;
static unsigned long long my_used;
static unsigned my_sm;

static int load(void) {
    if (count >= 0) return OK;
    const char *path = getenv("FAKE_NVML_FIGURES");
    FILE *fh = path ? fopen(path, "r") : NULL;
    if (!fh) return UNKNOWN;
    const char *env_rank = getenv("LOCAL_RANK");
    int local_rank = env_rank ? atoi(env_rank) : -1;
    char line[512];
    count = 0;
    while (fgets(line, sizeof line, fh)) {
        Gpu g;
        int rank, index;
        unsigned long long used;
        unsigned sm;
        if (count < MAX_GPUS &&
            sscanf(line, "gpu %95s %u %llu %llu %llu %u %u %u %u", g.uuid, &g.util, &g.used,
                   &g.total, &g.reserved, &g.power, &g.limit, &g.temp, &g.clock) == 9) {
            gpus[count++] = g;
        } else if (sscanf(line, "proc %d %d %llu %u", &rank, &index, &used, &sm) == 4 &&
                   rank == local_rank) {
            my_gpu = index;
            my_used = used * MIB;
            my_sm = sm;
        }
    }
    fclose(fh);
    return OK;
}

static Gpu *device(void *handle) {
    long index = (long)handle - 1;
    return index >= 0 && index < count ? &gpus[index] : NULL;
}

int nvmlInitWithFlags(unsigned flags) { (void)flags; return load(); }
int nvmlInit_v2(void) { return load(); }
int nvmlShutdown(void) { return OK; }

const char *nvmlErrorString(int result) {
    switch (result) {
        case INVALID: return "Invalid Argument";
        case NOT_FOUND: return "Not Found";
        case INSUFFICIENT: return "Insufficient Size";
        default: return "Unknown Error";
    }
}

int nvmlDeviceGetCount_v2(unsigned *n) { *n = (unsigned)count; return OK; }

int nvmlDeviceGetHandleByIndex_v2(unsigned index, void **handle) {
    if ((int)index >= count) return INVALID;
    *handle = (void *)(long)(index + 1);
    return OK;
}

int nvmlDeviceGetUUID(void *handle, char *uuid, unsigned length) {
    Gpu *g = device(handle);
    if (!g) return INVALID;
    snprintf(uuid, length, "%s", g->uuid);
    return OK;
}

int nvmlDeviceGetUtilizationRates(void *handle, Utilization *u) {
    Gpu *g = device(handle);
    if (!g) return INVALID;
    u->gpu = g->util;
    u->memory = 0;
    return OK;
}

int nvmlDeviceGetMemoryInfo(void *handle, Memory *m) {
    Gpu *g = device(handle);
    if (!g) return INVALID;
    m->total = g->total * MIB;
    m->used = (g->used + g->reserved) * MIB;
    m->free = m->total - m->used;
    return OK;
}

int nvmlDeviceGetMemoryInfo_v2(void *handle, Memory2 *m) {
    Gpu *g = device(handle);
    if (!g) return INVALID;
    m->total = g->total * MIB;
    m->reserved = g->reserved * MIB;
    m->used = g->used * MIB;
    m->free = m->total - m->used - m->reserved;
    return OK;
}

int nvmlDeviceGetPowerUsage(void *handle, unsigned *mw) {
    Gpu *g = device(handle);
    if (!g) return INVALID;
    *mw = g->power;
    return OK;
}

int nvmlDeviceGetEnforcedPowerLimit(void *handle, unsigned *mw) {
    Gpu *g = device(handle);
    if (!g) return INVALID;
    *mw = g->limit;
    return OK;
}

int nvmlDeviceGetTemperature(void *handle, int sensor, unsigned *c) {
    Gpu *g = device(handle);
    if (!g || sensor != 0) return INVALID;
    *c = g->temp;
    return OK;
}

int nvmlDeviceGetClockInfo(void *handle, int type, unsigned *mhz) {
    Gpu *g = device(handle);
    if (!g || type != 1) return INVALID; /* NVML_CLOCK_SM */
    *mhz = g->clock;
    return OK;
}

static int mine(void *handle) { return device(handle) && (long)handle - 1 == my_gpu; }

int nvmlDeviceGetComputeRunningProcesses_v3(void *handle, unsigned *n, ProcessInfo *infos) {
    if (!device(handle)) return INVALID;
    if (!mine(handle)) {
        *n = 0;
        return OK;
    }
    if (!infos || *n < 1) {
        *n = 1;
        return INSUFFICIENT;
    }
    infos[0].pid = (unsigned)getpid();
    infos[0].used = my_used;
    infos[0].gpu_instance = infos[0].compute_instance = 0xFFFFFFFF;
    *n = 1;
    return OK;
}

int nvmlDeviceGetProcessUtilization(void *handle, ProcessSample *samples, unsigned *n,
                                    unsigned long long since) {
    (void)since;
    if (!device(handle)) return INVALID;
    if (!mine(handle)) return NOT_FOUND;
    if (!samples || *n < 1) {
        *n = 1;
        return INSUFFICIENT;
    }
    struct timeval now;
    gettimeofday(&now, NULL);
    samples[0].pid = (unsigned)getpid();
    samples[0].timestamp = (unsigned long long)now.tv_sec * 1000000ULL + now.tv_usec;
    samples[0].sm = my_sm;
    samples[0].mem = samples[0].enc = samples[0].dec = 0;
    *n = 1;
    return OK;
}
