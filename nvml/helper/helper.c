/*
 * persyst-nvml: the node daemon's window on NVIDIA GPUs.
 *
 * The daemon is a static Go program without cgo; NVML is a C library that only GPU
 * nodes have. This small helper loads libnvidia-ml.so.1 at run time (dlopen, each
 * function looked up on its own, so an older driver loses a measurement, not the
 * helper), keeps NVML initialised for its life, integrates each GPU's utilization and
 * activity every 5 s (-i) and at every read, and answers the daemon's requests on
 * stdin/stdout with one line per GPU. The daemon gives every request a deadline and kills the helper when a
 * call hangs (a hung NVML call cannot be cancelled inside a process): that is why it is
 * a process of its own.
 *
 * Protocol (nvml/protocol.go parses it):
 *   hello:   "persyst-nvml 1", then "driver V", "absent SYMBOL"..., one
 *            "device I key=value..." per GPU, then one per MIG instance of the GPUs in
 *            MIG mode (parent=I gi=N), then "ready N";
 *            or "fail WHAT REASON" (no library, no driver) and exit.
 *   "read":  one "gpu I key=value..." per GPU, then "done". Values are cumulative
 *            (seconds of activity, millijoules, nanoseconds of throttling, ecc: the
 *            uncorrected memory errors since the driver loaded) except mem
 *            (now), mem_peak and reasons (since the previous read). A value "!why"
 *            means not measured, with why's spaces as '_'.
 *   "cost":  what each NVML call of a tick costs on GPU 0 ("cost CALL WALL_US CPU_US"
 *            lines, then "done"; bench/gpu_check.sh).
 *   "quit" or end of input: shut NVML down and exit.
 *
 * Usage: persyst-nvml [-l LIBRARY] [-i MILLISECONDS]
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "nvmlapi.h"

#define MAX_DEVICES 64
#define MAX_PROCS 64
#define MAX_SAMPLES 1024

static struct {
	nvmlReturn_t (*Init)(void);
	nvmlReturn_t (*Shutdown)(void);
	const char *(*ErrorString)(nvmlReturn_t);
	nvmlReturn_t (*DriverVersion)(char *, unsigned);
	nvmlReturn_t (*Count)(unsigned *);
	nvmlReturn_t (*Handle)(unsigned, nvmlDevice_t *);
	nvmlReturn_t (*Name)(nvmlDevice_t, char *, unsigned);
	nvmlReturn_t (*UUID)(nvmlDevice_t, char *, unsigned);
	nvmlReturn_t (*Pci)(nvmlDevice_t, nvmlPciInfo_t *);
	nvmlReturn_t (*Minor)(nvmlDevice_t, unsigned *);
	nvmlReturn_t (*Memory)(nvmlDevice_t, nvmlMemory_t *);
	nvmlReturn_t (*Utilization)(nvmlDevice_t, nvmlUtilization_t *);
	nvmlReturn_t (*Samples)(nvmlDevice_t, int, unsigned long long, int *, unsigned *, nvmlSample_t *);
	nvmlReturn_t (*Energy)(nvmlDevice_t, unsigned long long *);
	nvmlReturn_t (*Power)(nvmlDevice_t, unsigned *);
	nvmlReturn_t (*Violation)(nvmlDevice_t, int, nvmlViolationTime_t *);
	nvmlReturn_t (*Reasons)(nvmlDevice_t, unsigned long long *);
	nvmlReturn_t (*Procs)(nvmlDevice_t, unsigned *, nvmlProcessInfo_t *);
	nvmlReturn_t (*MigMode)(nvmlDevice_t, unsigned *, unsigned *);
	nvmlReturn_t (*Ecc)(nvmlDevice_t, int, int, unsigned long long *);
	nvmlReturn_t (*MigCount)(nvmlDevice_t, unsigned *);
	nvmlReturn_t (*MigHandle)(nvmlDevice_t, unsigned, nvmlDevice_t *);
	nvmlReturn_t (*GpuInstanceId)(nvmlDevice_t, unsigned *);
	nvmlReturn_t (*GpmMigGet)(nvmlDevice_t, unsigned, nvmlGpmSample_t);
	nvmlReturn_t (*GpmSupport)(nvmlDevice_t, nvmlGpmSupport_t *);
	nvmlReturn_t (*GpmAlloc)(nvmlGpmSample_t *);
	nvmlReturn_t (*GpmFree)(nvmlGpmSample_t);
	nvmlReturn_t (*GpmGet)(nvmlDevice_t, nvmlGpmSample_t);
	nvmlReturn_t (*GpmMetrics)(nvmlGpmMetricsGet_t *);
} api;

/* The GPM metrics integrated, in output order. */
static const struct {
	unsigned id;
	const char *key;
} gpm_metrics[] = {
	{NVML_GPM_METRIC_GRAPHICS_UTIL, "gpm_busy"},
	{NVML_GPM_METRIC_SM_UTIL, "sm"},
	{NVML_GPM_METRIC_SM_OCCUPANCY, "occupancy"},
	{NVML_GPM_METRIC_ANY_TENSOR_UTIL, "tensor"},
	{NVML_GPM_METRIC_DRAM_BW_UTIL, "dram"},
};
#define NGPM (sizeof gpm_metrics / sizeof gpm_metrics[0])

struct device {
	nvmlDevice_t h;
	int mig;      /* a GPU in MIG mode: its instances are devices of their own */
	int instance; /* a MIG instance (parent: its GPU's device, gi: its GPU instance) */
	int parent;
	unsigned gi;
	/* utilization samples: the newest seen, and the integrals since start */
	unsigned long long last_ts;
	int have_ts;
	double busy, util_cov, ut;
	nvmlReturn_t util_err;
	/* GPM: two samples alternate; integrals of each metric over gpm_cov seconds */
	int gpm;
	nvmlGpmSample_t gs[2];
	int gcur, ghave;
	double gt, gpm_cov, gpm_sum[NGPM], gpm_cov_m[NGPM];
	/* how long the last tick took, µs (the cost of measuring the GPU) */
	double tick_us, tick_cpu_us;
	nvmlReturn_t gpm_err[NGPM];
	/* since the previous read */
	unsigned long long mem_peak, reasons;
	int have_peak;
};

static struct device devs[MAX_DEVICES];
static unsigned ndev;
static nvmlGpmMetricsGet_t mget; /* large: static */
static nvmlSample_t samples[MAX_SAMPLES];

static void *sym(void *lib, const char *const *names, const char *want)
{
	for (; *names; names++) {
		void *p = dlsym(lib, *names);
		if (p)
			return p;
	}
	if (want)
		printf("absent %s\n", want);
	return NULL;
}

#define LOOKUP(field, ...)                                                    \
	do {                                                                  \
		static const char *const n_[] = {__VA_ARGS__, NULL};          \
		*(void **)&api.field = sym(lib, n_, n_[0]);                   \
	} while (0)

static double cpu_now(void);

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* errstr is NVML's words for r. */
static const char *errstr(nvmlReturn_t r)
{
	const char *s = api.ErrorString ? api.ErrorString(r) : NULL;
	return s ? s : "error";
}

/* why writes NVML's reason for r without spaces (the protocol's "!why"). */
static const char *why(nvmlReturn_t r)
{
	static char buf[96];
	const char *s = api.ErrorString ? api.ErrorString(r) : NULL;
	if (s == NULL)
		s = "error";
	snprintf(buf, sizeof buf, "%s", s);
	for (char *p = buf; *p; p++)
		if (*p == ' ' || *p == '\t' || *p == '\n' || *p == '=')
			*p = '_';
	return buf;
}

static void word(char *s)
{
	for (; *s; s++)
		if (*s == ' ' || *s == '\t' || *s == '\n' || *s == '=' || (unsigned char)*s < 32)
			*s = '_';
}

static void tick(struct device *d)
{
	double start = now(), cstart = cpu_now();
	if (api.Samples) {
		int vt = 0;
		unsigned n = MAX_SAMPLES;
		nvmlReturn_t r = api.Samples(d->h, NVML_GPU_UTILIZATION_SAMPLES, d->last_ts, &vt, &n, samples);
		if (r == NVML_SUCCESS) {
			d->util_err = 0;
			for (unsigned i = 0; i < n && i < MAX_SAMPLES; i++) {
				unsigned long long ts = samples[i].timeStamp;
				double v;
				if (ts <= d->last_ts)
					continue;
				if (!d->have_ts) {
					/* The first call returns the driver's buffer (seconds of
					 * history): start from its newest sample. */
					for (unsigned j = i; j < n && j < MAX_SAMPLES; j++)
						if (samples[j].timeStamp > d->last_ts)
							d->last_ts = samples[j].timeStamp;
					d->have_ts = 1;
					break;
				}
				switch (vt) {
				case NVML_VALUE_TYPE_DOUBLE: v = samples[i].sampleValue.dVal; break;
				case NVML_VALUE_TYPE_UNSIGNED_LONG: v = samples[i].sampleValue.ulVal; break;
				case NVML_VALUE_TYPE_UNSIGNED_LONG_LONG: v = samples[i].sampleValue.ullVal; break;
				default: v = samples[i].sampleValue.uiVal; break;
				}
				double dt = (ts - d->last_ts) / 1e6;
				if (v >= 0 && v <= 100) { /* also false for NaN */
					d->busy += v / 100 * dt;
					d->util_cov += dt;
				}
				d->last_ts = ts;
			}
		} else if (r != NVML_ERROR_NOT_FOUND) {
			d->util_err = r;
		}
	}
	if ((!api.Samples || d->util_err == NVML_ERROR_NOT_SUPPORTED) && api.Utilization) {
		/* No sample buffer (older drivers): the rate over the driver's last sample
		 * period, taken as holding since the previous tick. */
		nvmlUtilization_t u;
		double t = now();
		nvmlReturn_t r = api.Utilization(d->h, &u);
		if (r == NVML_SUCCESS) {
			if (d->have_ts) {
				double dt = t - d->ut;
				d->busy += (u.gpu > 100 ? 100 : u.gpu) / 100.0 * dt;
				d->util_cov += dt;
			}
			d->have_ts = 1;
			d->util_err = 0;
		} else {
			d->util_err = r;
		}
		d->ut = t;
	} else if (!api.Samples) {
		d->util_err = NVML_ERROR_FUNCTION_NOT_FOUND;
	}
	if (d->gpm) {
		double t = now();
		nvmlReturn_t r = d->instance ? api.GpmMigGet(devs[d->parent].h, d->gi, d->gs[d->gcur])
					     : api.GpmGet(d->h, d->gs[d->gcur]);
		if (r == NVML_SUCCESS) {
			if (d->ghave) {
				memset(&mget, 0, sizeof mget);
				mget.version = NVML_GPM_METRICS_GET_VERSION;
				mget.numMetrics = NGPM;
				mget.sample1 = d->gs[1 - d->gcur];
				mget.sample2 = d->gs[d->gcur];
				for (unsigned i = 0; i < NGPM; i++)
					mget.metrics[i].metricId = gpm_metrics[i].id;
				r = api.GpmMetrics(&mget);
				double dt = t - d->gt;
				for (unsigned i = 0; i < NGPM; i++) {
					nvmlReturn_t mr = r ? r : mget.metrics[i].nvmlReturn;
					double v = mget.metrics[i].value;
					if (mr == NVML_SUCCESS && !(v >= 0 && v <= 100.5))
						mr = NVML_ERROR_UNKNOWN; /* NaN: seen for DRAM on an H200 */
					d->gpm_err[i] = mr;
					if (mr == NVML_SUCCESS) {
						d->gpm_sum[i] += (v > 100 ? 100 : v) / 100 * dt;
						d->gpm_cov_m[i] += dt;
					}
				}
				if (r == NVML_SUCCESS)
					d->gpm_cov += dt;
			}
			d->gt = t;
			d->gcur = 1 - d->gcur;
			d->ghave = 1;
		} else {
			for (unsigned i = 0; i < NGPM; i++)
				d->gpm_err[i] = r;
			d->ghave = 0;
		}
	}
	if (api.Memory) {
		nvmlMemory_t m;
		if (api.Memory(d->h, &m) == NVML_SUCCESS && (!d->have_peak || m.used > d->mem_peak)) {
			d->mem_peak = m.used;
			d->have_peak = 1;
		}
	}
	if (api.Reasons) {
		unsigned long long rs;
		if (api.Reasons(d->h, &rs) == NVML_SUCCESS)
			d->reasons |= rs;
	}
	d->tick_us = (now() - start) * 1e6;
	d->tick_cpu_us = (cpu_now() - cstart) * 1e6;
}

/* procs writes the GPU's compute processes as pid:bytes,... The record's size differs
 * between drivers (24 bytes; 32 on some 535 drivers): the buffer is filled with a
 * pattern first and the stride read from how far the driver wrote. */
static void procs(struct device *d)
{
	static unsigned char buf[MAX_PROCS * 32 + 64];
	unsigned n = MAX_PROCS;
	if (!api.Procs) {
		printf(" procs=!Function_Not_Found");
		return;
	}
	memset(buf, 0xa5, sizeof buf);
	nvmlReturn_t r = api.Procs(d->h, &n, (nvmlProcessInfo_t *)buf);
	if (r == NVML_ERROR_INSUFFICIENT_SIZE) {
		printf(" procs=!more_than_%d_processes", MAX_PROCS);
		return;
	}
	if (r != NVML_SUCCESS) {
		printf(" procs=!%s", why(r));
		return;
	}
	if (n > MAX_PROCS)
		n = MAX_PROCS;
	size_t stride = sizeof(nvmlProcessInfo_t);
	if (n > 0) {
		size_t last = 0;
		for (size_t i = 0; i < sizeof buf; i++)
			if (buf[i] != 0xa5)
				last = i;
		if (last >= n * 24 && last < n * 32)
			stride = 32;
	}
	printf(" procs=");
	for (unsigned i = 0; i < n; i++) {
		nvmlProcessInfo_t p;
		memcpy(&p, buf + i * stride, sizeof p);
		printf("%s%u:%llu", i ? "," : "", p.pid, p.usedGpuMemory == ~0ULL ? 0ULL : p.usedGpuMemory);
	}
}

static void report(unsigned i)
{
	struct device *d = &devs[i];
	printf("gpu %u t=%.6f tick_us=%.0f tick_cpu_us=%.0f", i, now(), d->tick_us, d->tick_cpu_us);
	if (d->util_err && !d->have_ts)
		printf(" busy=!%s", why(d->util_err));
	else
		printf(" busy=%.6f util_s=%.6f", d->busy, d->util_cov);
	if (d->gpm) {
		printf(" gpm_s=%.6f", d->gpm_cov);
		for (unsigned k = 0; k < NGPM; k++) {
			if (d->gpm_cov_m[k] == 0 && d->gpm_err[k])
				printf(" %s=!%s", gpm_metrics[k].key, why(d->gpm_err[k]));
			else
				printf(" %s=%.6f %s_s=%.6f", gpm_metrics[k].key, d->gpm_sum[k], gpm_metrics[k].key,
				       d->gpm_cov_m[k]);
		}
	}
	if (api.Memory) {
		nvmlMemory_t m;
		nvmlReturn_t r = api.Memory(d->h, &m);
		if (r == NVML_SUCCESS) {
			if (!d->have_peak || m.used > d->mem_peak)
				d->mem_peak = m.used;
			printf(" mem=%llu mem_peak=%llu", m.used, d->mem_peak);
		} else {
			printf(" mem=!%s", why(r));
		}
	}
	d->have_peak = 0;
	/* A MIG instance's GPU is shared with the other instances: its power, energy,
	 * throttling and ECC are the GPU's, not the instance's. */
	int whole = !d->mig && !d->instance;
	if (api.Energy && whole) {
		unsigned long long e;
		nvmlReturn_t r = api.Energy(d->h, &e);
		if (r == NVML_SUCCESS)
			printf(" energy=%llu", e);
		else
			printf(" energy=!%s", why(r));
	}
	if (api.Power && whole) {
		unsigned p;
		if (api.Power(d->h, &p) == NVML_SUCCESS)
			printf(" power=%u", p);
	}
	if (api.Violation && whole) {
		nvmlViolationTime_t v;
		if (api.Violation(d->h, NVML_PERF_POLICY_POWER, &v) == NVML_SUCCESS)
			printf(" power_ns=%llu", v.violationTime);
		if (api.Violation(d->h, NVML_PERF_POLICY_THERMAL, &v) == NVML_SUCCESS)
			printf(" thermal_ns=%llu", v.violationTime);
	}
	if (api.Ecc && whole) {
		/* uncorrected errors since the driver loaded; NOT_SUPPORTED: ECC is off */
		unsigned long long e;
		if (api.Ecc(d->h, NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_VOLATILE_ECC, &e) == NVML_SUCCESS)
			printf(" ecc=%llu", e);
	}
	if (api.Reasons && !d->instance)
		printf(" reasons=%llx", d->reasons);
	d->reasons = 0;
	procs(d);
	printf("\n");
}

static double cpu_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* cost times each NVML call of a tick and a report on GPU 0, n times: "cost CALL WALL_US
 * CPU_US" lines (bench/gpu_check.sh). */
static void cost(int n)
{
	if (ndev == 0)
		return;
	struct device *d = &devs[0];
	for (int which = 0; which < 8; which++) {
		double w0 = now(), c0 = cpu_now();
		const char *name = "";
		for (int k = 0; k < n; k++) {
			unsigned long long x;
			unsigned u;
			nvmlMemory_t m;
			nvmlViolationTime_t v;
			int vt;
			switch (which) {
			case 0:
				name = "nvmlDeviceGetSamples";
				u = MAX_SAMPLES;
				if (api.Samples)
					api.Samples(d->h, NVML_GPU_UTILIZATION_SAMPLES, d->last_ts, &vt, &u, samples);
				break;
			case 1:
				name = "nvmlGpmSampleGet";
				if (d->gpm)
					api.GpmGet(d->h, d->gs[d->gcur]);
				break;
			case 2:
				name = "nvmlGpmMetricsGet";
				if (d->gpm && d->ghave) {
					api.GpmGet(d->h, d->gs[d->gcur]);
					memset(&mget, 0, sizeof mget);
					mget.version = NVML_GPM_METRICS_GET_VERSION;
					mget.numMetrics = NGPM;
					mget.sample1 = d->gs[1 - d->gcur];
					mget.sample2 = d->gs[d->gcur];
					for (unsigned i = 0; i < NGPM; i++)
						mget.metrics[i].metricId = gpm_metrics[i].id;
					api.GpmMetrics(&mget);
				}
				name = "nvmlGpmSampleGet+MetricsGet";
				break;
			case 3:
				name = "nvmlDeviceGetMemoryInfo";
				if (api.Memory)
					api.Memory(d->h, &m);
				break;
			case 4:
				name = "nvmlDeviceGetCurrentClocksEventReasons";
				if (api.Reasons)
					api.Reasons(d->h, &x);
				break;
			case 5:
				name = "nvmlDeviceGetTotalEnergyConsumption";
				if (api.Energy)
					api.Energy(d->h, &x);
				break;
			case 6:
				name = "nvmlDeviceGetViolationStatus";
				if (api.Violation)
					api.Violation(d->h, NVML_PERF_POLICY_THERMAL, &v);
				break;
			case 7:
				name = "nvmlDeviceGetComputeRunningProcesses";
				u = 0;
				if (api.Procs)
					api.Procs(d->h, &u, NULL);
				break;
			}
		}
		printf("cost %s %.1f %.1f\n", name, (now() - w0) / n * 1e6, (cpu_now() - c0) / n * 1e6);
	}
}

static void hello(void)
{
	char buf[128];
	if (api.DriverVersion && api.DriverVersion(buf, sizeof buf) == NVML_SUCCESS) {
		buf[sizeof buf - 1] = 0;
		word(buf);
		printf("driver %s\n", buf);
	}
	for (unsigned i = 0; i < ndev; i++) {
		struct device *d = &devs[i];
		printf("device %u", i);
		if (api.UUID && api.UUID(d->h, buf, sizeof buf) == NVML_SUCCESS) {
			buf[sizeof buf - 1] = 0;
			word(buf);
			printf(" uuid=%s", buf);
		}
		nvmlPciInfo_t pci;
		if (api.Pci && api.Pci(d->h, &pci) == NVML_SUCCESS && pci.busId[0]) {
			pci.busId[sizeof pci.busId - 1] = 0;
			word(pci.busId);
			printf(" bus=%s", pci.busId);
		}
		unsigned minor;
		if (api.Minor && api.Minor(d->h, &minor) == NVML_SUCCESS)
			printf(" minor=%u", minor);
		nvmlMemory_t m;
		if (api.Memory && api.Memory(d->h, &m) == NVML_SUCCESS)
			printf(" memory=%llu", m.total);
		printf(" mig=%d gpm=%d", d->mig, d->gpm);
		if (d->instance)
			printf(" parent=%d gi=%u", d->parent, d->gi);
		if (api.Name && api.Name(d->h, buf, sizeof buf) == NVML_SUCCESS) {
			buf[sizeof buf - 1] = 0;
			word(buf);
			printf(" name=%s", buf);
		}
		printf("\n");
	}
	printf("ready %u\n", ndev);
}

int main(int argc, char **argv)
{
	const char *libname = "libnvidia-ml.so.1";
	int interval = 5000;
	int c;
	while ((c = getopt(argc, argv, "l:i:")) != -1) {
		switch (c) {
		case 'l': libname = optarg; break;
		case 'i': interval = atoi(optarg); break;
		default:
			fprintf(stderr, "usage: persyst-nvml [-l LIBRARY] [-i MILLISECONDS]\n");
			return 2;
		}
	}
	if (interval < 100)
		interval = 100;
	/* Gone with the daemon: its end closes our input (no PR_SET_PDEATHSIG, which fires
	 * when the daemon's *thread* that started us ends, and Go ends threads). */
	setvbuf(stdout, NULL, _IOFBF, 1 << 16);
	printf("persyst-nvml 1\n");

	void *lib = dlopen(libname, RTLD_NOW | RTLD_LOCAL);
	if (lib == NULL) {
		char *e = dlerror();
		char msg[256];
		snprintf(msg, sizeof msg, "%s", e ? e : libname);
		printf("fail library %s\n", msg);
		fflush(stdout);
		return 1;
	}
	LOOKUP(Init, "nvmlInit_v2", "nvmlInit");
	LOOKUP(Shutdown, "nvmlShutdown");
	LOOKUP(ErrorString, "nvmlErrorString");
	LOOKUP(DriverVersion, "nvmlSystemGetDriverVersion");
	LOOKUP(Count, "nvmlDeviceGetCount_v2", "nvmlDeviceGetCount");
	LOOKUP(Handle, "nvmlDeviceGetHandleByIndex_v2", "nvmlDeviceGetHandleByIndex");
	LOOKUP(Name, "nvmlDeviceGetName");
	LOOKUP(UUID, "nvmlDeviceGetUUID");
	LOOKUP(Pci, "nvmlDeviceGetPciInfo_v3", "nvmlDeviceGetPciInfo_v2");
	LOOKUP(Minor, "nvmlDeviceGetMinorNumber");
	LOOKUP(Memory, "nvmlDeviceGetMemoryInfo");
	LOOKUP(Utilization, "nvmlDeviceGetUtilizationRates");
	LOOKUP(Samples, "nvmlDeviceGetSamples");
	LOOKUP(Energy, "nvmlDeviceGetTotalEnergyConsumption");
	LOOKUP(Power, "nvmlDeviceGetPowerUsage");
	LOOKUP(Violation, "nvmlDeviceGetViolationStatus");
	LOOKUP(Reasons, "nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons");
	LOOKUP(Procs, "nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetComputeRunningProcesses_v2");
	LOOKUP(MigMode, "nvmlDeviceGetMigMode");
	LOOKUP(Ecc, "nvmlDeviceGetTotalEccErrors");
	LOOKUP(MigCount, "nvmlDeviceGetMaxMigDeviceCount");
	LOOKUP(MigHandle, "nvmlDeviceGetMigDeviceHandleByIndex");
	LOOKUP(GpuInstanceId, "nvmlDeviceGetGpuInstanceId");
	LOOKUP(GpmMigGet, "nvmlGpmMigSampleGet");
	LOOKUP(GpmSupport, "nvmlGpmQueryDeviceSupport");
	LOOKUP(GpmAlloc, "nvmlGpmSampleAlloc");
	LOOKUP(GpmFree, "nvmlGpmSampleFree");
	LOOKUP(GpmGet, "nvmlGpmSampleGet");
	LOOKUP(GpmMetrics, "nvmlGpmMetricsGet");
	if (!api.Init || !api.Count || !api.Handle) {
		printf("fail library %s lacks nvmlInit, nvmlDeviceGetCount or nvmlDeviceGetHandleByIndex\n", libname);
		fflush(stdout);
		return 1;
	}
	nvmlReturn_t r = api.Init();
	if (r != NVML_SUCCESS) {
		printf("fail init %s\n", errstr(r));
		fflush(stdout);
		return 1;
	}
	unsigned n = 0;
	if ((r = api.Count(&n)) != NVML_SUCCESS) {
		printf("fail count %s\n", errstr(r));
		fflush(stdout);
		return 1;
	}
	for (unsigned i = 0; i < n && ndev < MAX_DEVICES; i++) {
		struct device *d = &devs[ndev];
		if (api.Handle(i, &d->h) != NVML_SUCCESS)
			continue; /* e.g. a GPU this process may not open */
		unsigned cur = 0, pending = 0;
		if (api.MigMode && api.MigMode(d->h, &cur, &pending) == NVML_SUCCESS)
			d->mig = cur == 1;
		nvmlGpmSupport_t s = {.version = NVML_GPM_SUPPORT_VERSION};
		if (api.GpmSupport && api.GpmAlloc && api.GpmFree && api.GpmGet && api.GpmMetrics &&
		    api.GpmSupport(d->h, &s) == NVML_SUCCESS && s.isSupportedDevice &&
		    api.GpmAlloc(&d->gs[0]) == NVML_SUCCESS) {
			if (api.GpmAlloc(&d->gs[1]) == NVML_SUCCESS)
				d->gpm = 1;
			else
				api.GpmFree(d->gs[0]);
		}
		ndev++;
	}
	/* MIG instances follow the GPUs, as devices of their own. */
	unsigned nphys = ndev;
	for (unsigned p = 0; p < nphys && api.MigCount && api.MigHandle; p++) {
		unsigned max = 0;
		if (!devs[p].mig || api.MigCount(devs[p].h, &max) != NVML_SUCCESS)
			continue;
		for (unsigned k = 0; k < max && ndev < MAX_DEVICES; k++) {
			struct device *d = &devs[ndev];
			if (api.MigHandle(devs[p].h, k, &d->h) != NVML_SUCCESS)
				continue; /* no instance in this slot */
			d->instance = 1;
			d->parent = p;
			if (api.GpuInstanceId)
				api.GpuInstanceId(d->h, &d->gi);
			if (devs[p].gpm && api.GpmMigGet && api.GpmAlloc(&d->gs[0]) == NVML_SUCCESS) {
				if (api.GpmAlloc(&d->gs[1]) == NVML_SUCCESS)
					d->gpm = 1;
				else
					api.GpmFree(d->gs[0]);
			}
			ndev++;
		}
	}
	for (unsigned i = 0; i < ndev; i++)
		tick(&devs[i]);
	hello();
	fflush(stdout);

	char line[64];
	double next = now() + interval / 1000.0;
	for (;;) {
		int wait = (int)((next - now()) * 1000);
		if (wait < 0)
			wait = 0;
		struct pollfd p = {.fd = 0, .events = POLLIN};
		int k = poll(&p, 1, wait);
		if (k < 0 && errno == EINTR)
			continue;
		if (k == 0) {
			for (unsigned i = 0; i < ndev; i++)
				tick(&devs[i]);
			next = now() + interval / 1000.0;
			continue;
		}
		if (fgets(line, sizeof line, stdin) == NULL)
			break;
		if (strncmp(line, "read", 4) == 0) {
			for (unsigned i = 0; i < ndev; i++)
				tick(&devs[i]);
			for (unsigned i = 0; i < ndev; i++)
				report(i);
			printf("done\n");
			fflush(stdout);
		} else if (strncmp(line, "cost", 4) == 0) {
			cost(20);
			printf("done\n");
			fflush(stdout);
		} else if (strncmp(line, "quit", 4) == 0) {
			break;
		} else {
			printf("error unknown request\n");
			fflush(stdout);
		}
	}
	for (unsigned i = 0; i < ndev; i++)
		if (devs[i].gpm) {
			api.GpmFree(devs[i].gs[0]);
			api.GpmFree(devs[i].gs[1]);
		}
	if (api.Shutdown)
		api.Shutdown();
	return 0;
}
