/* persyst.h — the parts of the persyst SPANK plugin that do not need Slurm: the
 * plugstack.conf arguments (options.c) and the wire protocol to the node daemon
 * (client.c). plugin.c owns the SPANK symbols and calls these. The Go package in this
 * directory exposes them to Go tests, which check them against the Go reference
 * (spank/options for the arguments, daemon/wire for the protocol). */
#ifndef PERSYST_H
#define PERSYST_H

#include <stddef.h>
#include <stdint.h>
#include <time.h>

/* The longest unix socket path Linux accepts (sun_path is 108 bytes). */
#define PERSYST_SOCKET_MAX 107
#define PERSYST_PATH_MAX 4096

#define PERSYST_DEFAULT_SOCKET "/run/persyst/persyst.sock"
#define PERSYST_DEFAULT_REPORT "/usr/bin/persyst"
#define PERSYST_DEFAULT_TIMEOUT_NS 5000000000LL
#define PERSYST_MAX_TIMEOUT_NS 300000000000LL

/* The plugin configuration from plugstack.conf (spank/options.Config). */
struct persyst_config {
	int default_on;                   /* jobs are measured when the user gives no --persyst */
	char socket[PERSYST_SOCKET_MAX + 1];
	int64_t timeout_ns;               /* bounds each exchange with the daemon */
	char report[PERSYST_PATH_MAX];    /* "" : srun prints no digest */
};

void persyst_config_defaults(struct persyst_config *c);

/* persyst_parse_args parses plugstack.conf arguments into c (starting from the defaults)
 * and calls errf once per bad argument with a message naming it. It returns the number
 * of errors; all are reported, so an admin sees them at once. */
int persyst_parse_args(int ac, char **av, struct persyst_config *c,
		       void (*errf)(void *arg, const char *msg), void *arg);

/* persyst_parse_value parses a --persyst value: 1 for "on", 0 for "off", -1 otherwise. */
int persyst_parse_value(const char *v);

enum persyst_kind {
	PERSYST_JOB_START = 1,
	PERSYST_STEP_START = 2,
	PERSYST_STEP_END = 3,
	PERSYST_JOB_END = 4,
};

/* One lifecycle event. Strings are owned by the caller. */
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
	const char *gpus;       /* the job's GPUs, Slurm's GRES indices ("0,2"); may be NULL */
	int      option;        /* -1: --persyst not given, 0: off, 1: on */
	int      has_exit;
	int      exit_status;   /* wait(2) status */
};

/* The protocol version (daemon/wire.Version) and the longest request line. */
#define PERSYST_WIRE_VERSION 1
#define PERSYST_MAX_MESSAGE (64 << 10)

/* persyst_step_name renders a Slurm step id the way sacct and the cgroup layout do
 * ("batch", "extern", "interactive" or the number) into buf. */
const char *persyst_step_name(uint32_t id, char *buf, size_t n);

/* persyst_encode writes the request for one event as a JSON line (with its newline) into
 * buf. default_on gives the option when the user gave none; now stamps it. It returns
 * the line's length, or -1 when it does not fit. */
int persyst_encode(char *buf, size_t n, int kind, const struct persyst_event *ev,
		   int default_on, const struct timespec *now);

/* What the daemon answered. */
struct persyst_reply {
	int ok;
	char error[512];                  /* the daemon's message when !ok (cut short if long) */
	char cgroup[PERSYST_PATH_MAX];    /* a step_start's cgroup ("" : none or unusable) */
};

/* persyst_parse_reply parses one reply line (without its newline). It returns 0, or -1
 * with a reason in why when the line is not a reply. */
int persyst_parse_reply(const char *line, size_t n, struct persyst_reply *r,
			char *why, size_t whyn);

/* Results of an exchange. */
enum {
	PERSYST_SENT = 0,     /* delivered, or called and answered ok */
	PERSYST_REFUSED = 1,  /* the daemon answered with an error (in reply->error) */
	PERSYST_FAILED = -1,  /* not delivered or no answer: the reason is in why */
	PERSYST_TIMEDOUT = -2 /* like FAILED: the deadline passed */
};

/* persyst_mark_unreachable writes note into the daemon-unreachable marker at path and
 * returns 1 if this process is the first to mark it (no marker, or a stale or empty one,
 * under the marker's lock), 0 if another process marked it or is marking it now. */
int persyst_mark_unreachable(const char *path, const char *note);

/* persyst_deliver sends one request line without waiting for the reply: it returns once
 * the line is in the socket's buffer (end events: any wait would delay Slurm). */
int persyst_deliver(const char *socket, const char *msg, size_t len, int64_t timeout_ns,
		    char *why, size_t whyn);

/* persyst_call sends one request line and reads the reply within timeout_ns. */
int persyst_call(const char *socket, const char *msg, size_t len, int64_t timeout_ns,
		 struct persyst_reply *reply, char *why, size_t whyn);

#endif
