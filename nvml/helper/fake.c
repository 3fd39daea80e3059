/*
 * A FAKE libnvidia-ml.so.1 for the tests of machines without an NVIDIA GPU. It exports
 * only the functions persyst's helper binds, with NVML's signatures (nvmlapi.h), and
 * plays a scenario: PERSYST_FAKE_NVML names a file of lines
 *
 *   driver VERSION
 *   fail init CODE                      nvmlInit returns CODE
 *   device uuid=U bus=B minor=N memory=BYTES name=NAME gpm=0|1 mig=0|1
 *   mig parent=I uuid=MIG-… gi=N memory=BYTES   a MIG instance of GPU I (a device of
 *                                       its own, 100 for the first, 101, ... in "at")
 *   at SECONDS gpu=I util=PCT sm=PCT occupancy=PCT tensor=PCT dram=PCT mem=BYTES
 *             power=WATTS throttle=none|power|thermal ecc=N (uncorrected errors so far)
 *   hang FUNCTION [after SECONDS]       the function never returns (a hung driver)
 *   crash FUNCTION [after SECONDS]      the function ends the process (exit status 3)
 *
 * The file is read again when it changes (its devices stay those first read).
 * Values are step functions of the time since nvmlInit: device I holds the values of
 * its latest "at" line. Utilization samples come every 1/6 s, energy is the integral of
 * power, GPM metrics the mean between two samples, throttle time accumulates while
 * throttled. PERSYST_FAKE_NVML_PROCS names a file, read at every call, of lines
 * "GPU PID BYTES": the GPUs' compute processes.
 *
 * Built with -DFAKE_OLD it is an old driver: no GPM, no sample buffer, no energy, and
 * only the unversioned names of the functions that have versions.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "nvmlapi.h"

#define EXPORT __attribute__((visibility("default")))
#define MAXD 16
#define MIG0 100 /* MIG instances are devices MIG0, MIG0+1, ... (their "at gpu=" too) */
#define MAXMIG 16
#define MAXAT 256
#define PERIOD_US 166667ULL

struct at {
	double t;
	int gpu;
	double util, sm, occ, tensor, dram, power;
	unsigned long long mem;
	int throttle; /* 0 none, 1 power, 2 thermal */
	unsigned long long ecc; /* uncorrected ECC errors so far */
};

static struct {
	char uuid[96], bus[32], name[96];
	unsigned minor;
	unsigned long long memory;
	int gpm, mig;
	int instance, parent; /* a MIG instance of GPU parent, GPU instance gi */
	unsigned gi;
} devs[MIG0 + MAXMIG];
static int ndev, nmig, init_fail, loaded;
static char driver[64] = "999.0.fake";
static struct at ats[MAXAT];
static int nat;
static struct {
	char fn[64];
	double after;
	int crash; /* exit instead of hanging */
} hangs[16];
static int nhang;
static double t0;
static unsigned long long t0_us;

struct nvmlDevice_st {
	int i;
};
static struct nvmlDevice_st handles[MIG0 + MAXMIG];

static double mono(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* load reads the scenario, again whenever the file changed (a test rewrites it between
 * jobs); the devices are those of the first read. */
static void load(void)
{
	const char *path = getenv("PERSYST_FAKE_NVML");
	struct stat st;
	static struct timespec seen;
	if (!path || stat(path, &st) != 0)
		return;
	if (loaded && st.st_mtim.tv_sec == seen.tv_sec && st.st_mtim.tv_nsec == seen.tv_nsec)
		return;
	seen = st.st_mtim;
	int first = !loaded;
	loaded = 1;
	FILE *f = fopen(path, "r");
	if (!f)
		return;
	nat = 0;
	nhang = 0;
	char line[512];
	while (fgets(line, sizeof line, f)) {
		char *save, *w = strtok_r(line, " \t\n", &save);
		if (!w || w[0] == '#')
			continue;
		if (!strcmp(w, "driver")) {
			if ((w = strtok_r(NULL, " \t\n", &save)))
				snprintf(driver, sizeof driver, "%s", w);
		} else if (!strcmp(w, "fail")) {
			strtok_r(NULL, " \t\n", &save);
			if ((w = strtok_r(NULL, " \t\n", &save)))
				init_fail = atoi(w);
		} else if ((!strcmp(w, "hang") || !strcmp(w, "crash")) && nhang < 16) {
			hangs[nhang].crash = !strcmp(w, "crash");
			hangs[nhang].after = 0;
			if ((w = strtok_r(NULL, " \t\n", &save)))
				snprintf(hangs[nhang].fn, sizeof hangs[nhang].fn, "%s", w);
			if ((w = strtok_r(NULL, " \t\n", &save)) && !strcmp(w, "after") &&
			    (w = strtok_r(NULL, " \t\n", &save)))
				hangs[nhang].after = atof(w);
			nhang++;
		} else if ((!strcmp(w, "device") || !strcmp(w, "mig")) && !first) {
			continue;
		} else if (!strcmp(w, "mig") && nmig < MAXMIG) {
			int i = MIG0 + nmig++;
			snprintf(devs[i].name, sizeof devs[i].name, "Fake MIG");
			devs[i].instance = devs[i].mig = 1;
			devs[i].memory = 10ULL << 30;
			while ((w = strtok_r(NULL, " \t\n", &save))) {
				char *v = strchr(w, '=');
				if (!v)
					continue;
				*v++ = 0;
				if (!strcmp(w, "uuid")) snprintf(devs[i].uuid, sizeof devs[i].uuid, "%s", v);
				else if (!strcmp(w, "parent")) devs[i].parent = atoi(v);
				else if (!strcmp(w, "gi")) devs[i].gi = atoi(v);
				else if (!strcmp(w, "memory")) devs[i].memory = strtoull(v, NULL, 10);
			}
			devs[i].gpm = devs[devs[i].parent].gpm;
		} else if (!strcmp(w, "device") && ndev < MAXD) {
			int i = ndev++;
			snprintf(devs[i].uuid, sizeof devs[i].uuid, "GPU-fake-%d", i);
			snprintf(devs[i].bus, sizeof devs[i].bus, "00000000:%02X:00.0", i + 1);
			snprintf(devs[i].name, sizeof devs[i].name, "Fake GPU");
			devs[i].minor = i;
			devs[i].memory = 80ULL << 30;
			while ((w = strtok_r(NULL, " \t\n", &save))) {
				char *v = strchr(w, '=');
				if (!v)
					continue;
				*v++ = 0;
				if (!strcmp(w, "uuid")) snprintf(devs[i].uuid, sizeof devs[i].uuid, "%s", v);
				else if (!strcmp(w, "bus")) snprintf(devs[i].bus, sizeof devs[i].bus, "%s", v);
				else if (!strcmp(w, "name")) snprintf(devs[i].name, sizeof devs[i].name, "%s", v);
				else if (!strcmp(w, "minor")) devs[i].minor = atoi(v);
				else if (!strcmp(w, "memory")) devs[i].memory = strtoull(v, NULL, 10);
				else if (!strcmp(w, "gpm")) devs[i].gpm = atoi(v);
				else if (!strcmp(w, "mig")) devs[i].mig = atoi(v);
			}
		} else if (!strcmp(w, "at") && nat < MAXAT) {
			struct at *a = &ats[nat++];
			memset(a, 0, sizeof *a);
			if ((w = strtok_r(NULL, " \t\n", &save)))
				a->t = atof(w);
			while ((w = strtok_r(NULL, " \t\n", &save))) {
				char *v = strchr(w, '=');
				if (!v)
					continue;
				*v++ = 0;
				if (!strcmp(w, "gpu")) a->gpu = atoi(v);
				else if (!strcmp(w, "util")) a->util = atof(v);
				else if (!strcmp(w, "sm")) a->sm = atof(v);
				else if (!strcmp(w, "occupancy")) a->occ = atof(v);
				else if (!strcmp(w, "tensor")) a->tensor = atof(v);
				else if (!strcmp(w, "dram")) a->dram = atof(v);
				else if (!strcmp(w, "power")) a->power = atof(v);
				else if (!strcmp(w, "mem")) a->mem = strtoull(v, NULL, 10);
				else if (!strcmp(w, "ecc")) a->ecc = strtoull(v, NULL, 10);
				else if (!strcmp(w, "throttle")) a->throttle = !strcmp(v, "power") ? 1 : !strcmp(v, "thermal") ? 2 : 0;
			}
		}
	}
	fclose(f);
}

static void maybe_hang(const char *fn)
{
	for (int i = 0; i < nhang; i++)
		if (!strcmp(hangs[i].fn, fn) && mono() - t0 >= hangs[i].after) {
			if (hangs[i].crash)
				_exit(3);
			for (;;)
				pause();
		}
}

/* state returns device gpu's values at time t (seconds since init). */
static struct at state(int gpu, double t)
{
	struct at s;
	memset(&s, 0, sizeof s);
	double best = -1;
	for (int i = 0; i < nat; i++)
		if (ats[i].gpu == gpu && ats[i].t <= t && ats[i].t >= best) {
			s = ats[i];
			best = ats[i].t;
		}
	return s;
}

/* integral of field f of device gpu over [a, b], in value·seconds. */
static double integral(int gpu, double a, double b, int f)
{
	double sum = 0;
	const double step = 0.01;
	for (double t = a; t < b; t += step) {
		double dt = t + step > b ? b - t : step;
		struct at s = state(gpu, t);
		double v = f == 0 ? s.util : f == 1 ? s.sm : f == 2 ? s.occ : f == 3 ? s.tensor : f == 4 ? s.dram
			 : f == 5 ? s.power : f == 6 ? (s.throttle == 1) : (s.throttle == 2);
		sum += v * dt;
	}
	return sum;
}

static int dev(nvmlDevice_t h)
{
	load();
	if (h >= handles && h < handles + ndev)
		return h->i;
	if (h >= handles + MIG0 && h < handles + MIG0 + nmig)
		return h->i;
	return -1;
}

#ifdef FAKE_OLD
EXPORT nvmlReturn_t nvmlInit(void)
#else
EXPORT nvmlReturn_t nvmlInit_v2(void)
#endif
{
	load();
	maybe_hang("nvmlInit_v2");
	if (init_fail)
		return init_fail;
	t0 = mono();
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	t0_us = ts.tv_sec * 1000000ULL + ts.tv_nsec / 1000;
	for (int i = 0; i < MIG0 + MAXMIG; i++)
		handles[i].i = i;
	return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlShutdown(void) { return NVML_SUCCESS; }

EXPORT const char *nvmlErrorString(nvmlReturn_t r)
{
	switch (r) {
	case NVML_SUCCESS: return "Success";
	case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
	case NVML_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
	case NVML_ERROR_NOT_FOUND: return "Not Found";
	case NVML_ERROR_GPU_IS_LOST: return "GPU is lost";
	default: return "Unknown Error";
	}
}

EXPORT nvmlReturn_t nvmlSystemGetDriverVersion(char *v, unsigned n)
{
	snprintf(v, n, "%s", driver);
	return NVML_SUCCESS;
}

#ifdef FAKE_OLD
EXPORT nvmlReturn_t nvmlDeviceGetCount(unsigned *n)
#else
EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned *n)
#endif
{
	*n = ndev;
	return NVML_SUCCESS;
}

#ifdef FAKE_OLD
EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned i, nvmlDevice_t *h)
#else
EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned i, nvmlDevice_t *h)
#endif
{
	if ((int)i >= ndev)
		return NVML_ERROR_INVALID_ARGUMENT;
	*h = &handles[i];
	return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t h, char *s, unsigned n)
{
	int i = dev(h);
	if (i < 0)
		return NVML_ERROR_INVALID_ARGUMENT;
	snprintf(s, n, "%s", devs[i].name);
	return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t h, char *s, unsigned n)
{
	int i = dev(h);
	if (i < 0)
		return NVML_ERROR_INVALID_ARGUMENT;
	snprintf(s, n, "%s", devs[i].uuid);
	return NVML_SUCCESS;
}

#ifndef FAKE_OLD
EXPORT nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t h, nvmlPciInfo_t *p)
{
	int i = dev(h);
	if (i < 0)
		return NVML_ERROR_INVALID_ARGUMENT;
	if (devs[i].instance)
		return NVML_ERROR_NOT_SUPPORTED;
	memset(p, 0, sizeof *p);
	snprintf(p->busId, sizeof p->busId, "%s", devs[i].bus);
	return NVML_SUCCESS;
}
#endif

EXPORT nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t h, unsigned *m)
{
	int i = dev(h);
	if (i < 0)
		return NVML_ERROR_INVALID_ARGUMENT;
	if (devs[i].instance)
		return NVML_ERROR_NOT_SUPPORTED;
	*m = devs[i].minor;
	return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t h, nvmlMemory_t *m)
{
	int i = dev(h);
	if (i < 0)
		return NVML_ERROR_INVALID_ARGUMENT;
	maybe_hang("nvmlDeviceGetMemoryInfo");
	struct at s = state(i, mono() - t0);
	m->total = devs[i].memory;
	m->used = s.mem;
	m->free = m->total > s.mem ? m->total - s.mem : 0;
	return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t h, nvmlUtilization_t *u)
{
	int i = dev(h);
	if (i < 0)
		return NVML_ERROR_INVALID_ARGUMENT;
	if (devs[i].mig)
		return NVML_ERROR_NOT_SUPPORTED;
	struct at s = state(i, mono() - t0);
	u->gpu = (unsigned)s.util;
	u->memory = (unsigned)s.dram;
	return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t h, unsigned *n, nvmlProcessInfo_t *out)
{
	int i = dev(h);
	if (i < 0)
		return NVML_ERROR_INVALID_ARGUMENT;
	const char *path = getenv("PERSYST_FAKE_NVML_PROCS");
	FILE *f = path ? fopen(path, "r") : NULL;
	unsigned k = 0, cap = *n;
	int gpu;
	unsigned pid;
	unsigned long long mem;
	while (f && fscanf(f, "%d %u %llu", &gpu, &pid, &mem) == 3) {
		if (gpu != i)
			continue;
		if (k < cap && out) {
			out[k].pid = pid;
			out[k].usedGpuMemory = mem;
			out[k].gpuInstanceId = out[k].computeInstanceId = 0xFFFFFFFF;
		}
		k++;
	}
	if (f)
		fclose(f);
	*n = k;
	return k > cap ? NVML_ERROR_INSUFFICIENT_SIZE : NVML_SUCCESS;
}

#ifndef FAKE_OLD
EXPORT nvmlReturn_t nvmlDeviceGetSamples(nvmlDevice_t h, int type, unsigned long long last, int *vt, unsigned *n,
					 nvmlSample_t *out)
{
	int i = dev(h);
	if (i < 0 || type != NVML_GPU_UTILIZATION_SAMPLES)
		return NVML_ERROR_INVALID_ARGUMENT;
	if (devs[i].mig)
		return NVML_ERROR_NOT_SUPPORTED;
	double t = mono() - t0;
	unsigned long long nowus = t0_us + (unsigned long long)(t * 1e6);
	/* The driver keeps about the last 20 s of samples. */
	unsigned long long from = last > t0_us ? last : t0_us;
	if (nowus > from + 20000000ULL)
		from = nowus - 20000000ULL;
	unsigned long long k0 = (from - t0_us) / PERIOD_US + 1, k1 = (nowus - t0_us) / PERIOD_US;
	unsigned k = 0;
	*vt = NVML_VALUE_TYPE_UNSIGNED_INT;
	for (unsigned long long j = k0; j <= k1; j++) {
		unsigned long long ts = t0_us + j * PERIOD_US;
		if (ts <= last)
			continue;
		if (out == NULL || k >= *n)
			break;
		/* a sample is the mean over the period that ends at it */
		double a = (j - 1) * PERIOD_US / 1e6, b = j * PERIOD_US / 1e6;
		out[k].timeStamp = ts;
		out[k].sampleValue.uiVal = (unsigned)(integral(i, a, b, 0) / (b - a) + 0.5);
		k++;
	}
	if (k == 0)
		return NVML_ERROR_NOT_FOUND;
	*n = k;
	return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetTotalEnergyConsumption(nvmlDevice_t h, unsigned long long *e)
{
	int i = dev(h);
	if (i < 0)
		return NVML_ERROR_INVALID_ARGUMENT;
	/* starts at an arbitrary count, as a driver's does */
	*e = 1000000ULL + (unsigned long long)(integral(i, 0, mono() - t0, 5) * 1000);
	return NVML_SUCCESS;
}
#endif

EXPORT nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t h, unsigned *p)
{
	int i = dev(h);
	if (i < 0)
		return NVML_ERROR_INVALID_ARGUMENT;
	*p = (unsigned)(state(i, mono() - t0).power * 1000);
	return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetViolationStatus(nvmlDevice_t h, int policy, nvmlViolationTime_t *v)
{
	int i = dev(h);
	if (i < 0 || policy > 1)
		return NVML_ERROR_INVALID_ARGUMENT;
	double t = mono() - t0;
	v->referenceTime = t0_us + (unsigned long long)(t * 1e6);
	v->violationTime = (unsigned long long)(integral(i, 0, t, policy == 0 ? 6 : 7) * 1e9);
	return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(nvmlDevice_t h, unsigned long long *r)
{
	int i = dev(h);
	if (i < 0)
		return NVML_ERROR_INVALID_ARGUMENT;
	struct at s = state(i, mono() - t0);
	*r = s.throttle == 1 ? NVML_CLOCKS_EVENT_SW_POWER_CAP : s.throttle == 2 ? NVML_CLOCKS_EVENT_HW_THERMAL : 0;
	if (s.util == 0)
		*r |= 1; /* idle */
	return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t h, int type, int counter, unsigned long long *n)
{
	int i = dev(h);
	if (i < 0 || type != NVML_MEMORY_ERROR_TYPE_UNCORRECTED || counter != NVML_VOLATILE_ECC)
		return NVML_ERROR_INVALID_ARGUMENT;
	*n = state(i, mono() - t0).ecc;
	return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t h, unsigned *n)
{
	int i = dev(h);
	if (i < 0 || devs[i].instance)
		return NVML_ERROR_INVALID_ARGUMENT;
	*n = 0;
	for (int j = 0; j < nmig; j++)
		*n += devs[MIG0 + j].parent == i;
	return devs[i].mig ? NVML_SUCCESS : NVML_ERROR_NOT_SUPPORTED;
}

EXPORT nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t h, unsigned k, nvmlDevice_t *out)
{
	int i = dev(h);
	if (i < 0 || devs[i].instance)
		return NVML_ERROR_INVALID_ARGUMENT;
	for (int j = 0; j < nmig; j++)
		if (devs[MIG0 + j].parent == i && k-- == 0) {
			*out = &handles[MIG0 + j];
			return NVML_SUCCESS;
		}
	return NVML_ERROR_NOT_FOUND;
}

EXPORT nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t h, unsigned *gi)
{
	int i = dev(h);
	if (i < 0 || !devs[i].instance)
		return NVML_ERROR_INVALID_ARGUMENT;
	*gi = devs[i].gi;
	return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t h, unsigned *cur, unsigned *pending)
{
	int i = dev(h);
	if (i < 0)
		return NVML_ERROR_INVALID_ARGUMENT;
	*cur = *pending = devs[i].mig;
	return NVML_SUCCESS;
}

#ifndef FAKE_OLD
struct nvmlGpmSample_st {
	int gpu;
	double t;
};

EXPORT nvmlReturn_t nvmlGpmQueryDeviceSupport(nvmlDevice_t h, nvmlGpmSupport_t *s)
{
	int i = dev(h);
	if (i < 0 || s->version != NVML_GPM_SUPPORT_VERSION)
		return NVML_ERROR_INVALID_ARGUMENT;
	s->isSupportedDevice = devs[i].gpm;
	return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlGpmSampleAlloc(nvmlGpmSample_t *s)
{
	s->handle = calloc(1, sizeof *s->handle);
	return s->handle ? NVML_SUCCESS : NVML_ERROR_UNKNOWN;
}

EXPORT nvmlReturn_t nvmlGpmSampleFree(nvmlGpmSample_t s)
{
	free(s.handle);
	return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlGpmSampleGet(nvmlDevice_t h, nvmlGpmSample_t s)
{
	int i = dev(h);
	if (i < 0 || !s.handle || !devs[i].gpm)
		return NVML_ERROR_INVALID_ARGUMENT;
	s.handle->gpu = i;
	s.handle->t = mono() - t0;
	return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlGpmMigSampleGet(nvmlDevice_t h, unsigned gi, nvmlGpmSample_t s)
{
	int i = dev(h);
	if (i < 0 || devs[i].instance || !s.handle)
		return NVML_ERROR_INVALID_ARGUMENT;
	for (int j = 0; j < nmig; j++)
		if (devs[MIG0 + j].parent == i && devs[MIG0 + j].gi == gi) {
			s.handle->gpu = MIG0 + j;
			s.handle->t = mono() - t0;
			return NVML_SUCCESS;
		}
	return NVML_ERROR_NOT_FOUND;
}

EXPORT nvmlReturn_t nvmlGpmMetricsGet(nvmlGpmMetricsGet_t *m)
{
	if (m->version != NVML_GPM_METRICS_GET_VERSION || !m->sample1.handle || !m->sample2.handle ||
	    m->numMetrics > PERSYST_GPM_METRIC_MAX)
		return NVML_ERROR_INVALID_ARGUMENT;
	load();
	struct nvmlGpmSample_st *a = m->sample1.handle, *b = m->sample2.handle;
	if (a->gpu != b->gpu || b->t <= a->t)
		return NVML_ERROR_INVALID_ARGUMENT;
	for (unsigned k = 0; k < m->numMetrics; k++) {
		int f;
		switch (m->metrics[k].metricId) {
		case NVML_GPM_METRIC_GRAPHICS_UTIL: f = 0; break;
		case NVML_GPM_METRIC_SM_UTIL: f = 1; break;
		case NVML_GPM_METRIC_SM_OCCUPANCY: f = 2; break;
		case NVML_GPM_METRIC_ANY_TENSOR_UTIL: f = 3; break;
		case NVML_GPM_METRIC_DRAM_BW_UTIL: f = 4; break;
		default: m->metrics[k].nvmlReturn = NVML_ERROR_NOT_SUPPORTED; continue;
		}
		m->metrics[k].value = integral(a->gpu, a->t, b->t, f) / (b->t - a->t);
		m->metrics[k].nvmlReturn = NVML_SUCCESS;
	}
	return NVML_SUCCESS;
}
#endif
