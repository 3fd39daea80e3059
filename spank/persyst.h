/* persyst.h — the plain values the C side of the SPANK plugin hands to Go. */
#ifndef PERSYST_H
#define PERSYST_H

#include <stdint.h>

enum persyst_kind {
	PERSYST_JOB_START = 1,
	PERSYST_STEP_START = 2,
	PERSYST_STEP_END = 3,
	PERSYST_JOB_END = 4,
};

enum persyst_level {
	PERSYST_LOG_ERROR = 0,
	PERSYST_LOG_INFO = 1,
	PERSYST_LOG_VERBOSE = 2,
	PERSYST_LOG_DEBUG = 3,
};

/* One lifecycle event. Strings are owned by the caller and valid for the call only. */
struct persyst_event {
	uint32_t job_id;
	uint32_t step_id;       /* Slurm step id, including SLURM_BATCH_SCRIPT etc. */
	int      has_step;
	uint32_t array_job_id;
	uint32_t array_task_id;
	uint32_t uid;
	uint32_t gid;
	uint32_t node_id;
	uint32_t nnodes;
	uint32_t local_tasks;
	uint32_t total_tasks;
	uint32_t ncpus;
	uint64_t job_mem_mb;
	uint64_t step_mem_mb;
	const char *job_cores;  /* may be NULL */
	const char *step_cores; /* may be NULL */
	int      option;        /* -1: --persyst not given, 0: off, 1: on */
	int      has_exit;
	int      exit_status;   /* wait(2) status */
};

/* Implemented in C (plugin.c), called from Go. */
void persyst_log(int level, const char *msg);
/* Remember the cgroup directory slurmstepd moves the step's tasks into (task_post_fork)
 * (NULL or "" : none). Called in slurmstepd before the tasks are forked. */
void persyst_set_join(const char *dir);

#endif
