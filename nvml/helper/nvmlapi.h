/*
 * The part of NVML's API (nvml.h, NVML_API_VERSION 12 and 13) that persyst uses,
 * declared here so that neither the helper nor the tests' fake library needs the
 * CUDA toolkit's header. Layouts are NVML's own; every function is looked up at run
 * time, so a driver without one loses that measurement, not the helper.
 */
#ifndef PERSYST_NVMLAPI_H
#define PERSYST_NVMLAPI_H

typedef int nvmlReturn_t;
typedef struct nvmlDevice_st *nvmlDevice_t;

enum {
	NVML_SUCCESS = 0,
	NVML_ERROR_UNINITIALIZED = 1,
	NVML_ERROR_INVALID_ARGUMENT = 2,
	NVML_ERROR_NOT_SUPPORTED = 3,
	NVML_ERROR_NO_PERMISSION = 4,
	NVML_ERROR_NOT_FOUND = 6,
	NVML_ERROR_INSUFFICIENT_SIZE = 7,
	NVML_ERROR_DRIVER_NOT_LOADED = 9,
	NVML_ERROR_TIMEOUT = 10,
	NVML_ERROR_FUNCTION_NOT_FOUND = 13,
	NVML_ERROR_GPU_IS_LOST = 15,
	NVML_ERROR_UNKNOWN = 999,
};

typedef struct {
	unsigned long long total, free, used;
} nvmlMemory_t;

typedef struct {
	unsigned int gpu, memory;
} nvmlUtilization_t;

typedef struct {
	char busIdLegacy[16];
	unsigned int domain, bus, device, pciDeviceId, pciSubSystemId;
	char busId[32];
} nvmlPciInfo_t;

typedef union {
	double dVal;
	int siVal;
	unsigned int uiVal;
	unsigned long ulVal;
	unsigned long long ullVal;
	signed long long sllVal;
	unsigned short usVal;
} nvmlValue_t;

typedef struct {
	unsigned long long timeStamp; /* µs */
	nvmlValue_t sampleValue;
} nvmlSample_t;

enum { NVML_GPU_UTILIZATION_SAMPLES = 1 };
enum {
	NVML_VALUE_TYPE_DOUBLE = 0,
	NVML_VALUE_TYPE_UNSIGNED_INT = 1,
	NVML_VALUE_TYPE_UNSIGNED_LONG = 2,
	NVML_VALUE_TYPE_UNSIGNED_LONG_LONG = 3,
};

typedef struct {
	unsigned long long referenceTime; /* µs */
	unsigned long long violationTime; /* ns */
} nvmlViolationTime_t;

enum { NVML_PERF_POLICY_POWER = 0, NVML_PERF_POLICY_THERMAL = 1 };

/* nvmlProcessInfo_t of NVML 11.5 and later ("v2" layout, used by _v2 and _v3); some
 * 535 drivers wrote 32 bytes a record (the helper measures the stride). */
typedef struct {
	unsigned int pid;
	unsigned long long usedGpuMemory;
	unsigned int gpuInstanceId, computeInstanceId;
} nvmlProcessInfo_t;

/* GPU performance monitoring (Hopper and newer). */
typedef struct {
	struct nvmlGpmSample_st *handle;
} nvmlGpmSample_t;

typedef struct {
	char *shortName, *longName, *unit;
} nvmlGpmMetricMetricInfo_t;

typedef struct {
	unsigned int metricId;
	nvmlReturn_t nvmlReturn;
	double value;
	nvmlGpmMetricMetricInfo_t metricInfo;
} nvmlGpmMetric_t;

/* NVML_GPM_METRIC_MAX is 98 in older headers and 333 in newer ones; a driver reads
 * numMetrics entries, so the larger array serves both. */
#define PERSYST_GPM_METRIC_MAX 333

typedef struct {
	unsigned int version;
	unsigned int numMetrics;
	nvmlGpmSample_t sample1, sample2;
	nvmlGpmMetric_t metrics[PERSYST_GPM_METRIC_MAX];
} nvmlGpmMetricsGet_t;

#define NVML_GPM_METRICS_GET_VERSION 1

typedef struct {
	unsigned int version;
	unsigned int isSupportedDevice;
} nvmlGpmSupport_t;

#define NVML_GPM_SUPPORT_VERSION 1

enum {
	NVML_GPM_METRIC_GRAPHICS_UTIL = 1,
	NVML_GPM_METRIC_SM_UTIL = 2,
	NVML_GPM_METRIC_SM_OCCUPANCY = 3,
	NVML_GPM_METRIC_ANY_TENSOR_UTIL = 5,
	NVML_GPM_METRIC_DRAM_BW_UTIL = 10,
};

/* nvmlDeviceGetTotalEccErrors: error type and counter type. */
enum { NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1 };
enum { NVML_VOLATILE_ECC = 0 };

/* Clock event ("throttle") reasons. */
#define NVML_CLOCKS_EVENT_SW_POWER_CAP 0x4ULL
#define NVML_CLOCKS_EVENT_HW_SLOWDOWN 0x8ULL
#define NVML_CLOCKS_EVENT_SW_THERMAL 0x20ULL
#define NVML_CLOCKS_EVENT_HW_THERMAL 0x40ULL
#define NVML_CLOCKS_EVENT_HW_POWER_BRAKE 0x80ULL

#endif
