/*
 * plugin.c — the persyst SPANK plugin: every SPANK symbol, in C (like pyxis).
 *
 * The plugin is loaded by every Slurm process a job touches (sbatch, srun, salloc,
 * slurmd, each slurmstepd, the prolog and epilog), so it is plain C with no runtime to
 * start: loading it and sending an event costs well under a millisecond. What it does:
 * registers --persyst (and PERSYST=on|off), parses its plugstack.conf arguments
 * (options.c), and sends the job's lifecycle events to the node daemon over its unix
 * socket (client.c, the protocol of daemon/wire). The daemon does everything else.
 *
 * Start events wait for the daemon's answer (it prepares the job's cgroup before the
 * tasks start); the batch step's end waits too, bounded, because the daemon writes the
 * digest into the job's output before the job is complete. Other end events are
 * delivered without waiting.
 *
 * Failures never fail a job: every hook returns 0 (ESPANK_SUCCESS) except the option
 * callback, which rejects a bad --persyst value in sbatch/srun/salloc, before the job exists.
 */
#define _GNU_SOURCE /* pipe2 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>

#include <slurm/slurm.h>
#include <slurm/spank.h>

#include "persyst.h"

/* SPANK_PLUGIN defines plugin_name, plugin_type and plugin_version. */
SPANK_PLUGIN(persyst, 1);

extern char **environ;

#define OPT_PERSYST 1

static int opt_value = -1;    /* -1: not given, 0: off, 1: on */
static int plugin_disabled;   /* a plugstack.conf argument was wrong */
static int configured;        /* cfg holds valid arguments */
static struct persyst_config cfg;
static int daemon_failed;     /* the daemon did not answer once: log only the first time */
static int exit_status_known;
static int exit_status;
static int srun_alone;        /* srun started its own job (not inside sbatch or salloc) */

static int opt_cb(int val, const char *optarg, int remote);

/* The cgroup.procs file of the cgroup the daemon created for this job, set before the
 * tasks fork (see set_join); tasks write their pid there. */
static char join_procs[PATH_MAX];

static struct spank_option persyst_option = {
	"persyst", "on|off",
	"Job performance monitoring by persyst: 'on' (site default) or 'off' to opt out. "
	"Also set by PERSYST=on|off in the environment.",
	1, OPT_PERSYST, opt_cb,
};

/* in_job says whether this process runs for a job on a compute node (slurmstepd, the
 * prolog/epilog, slurmd): there, slurm_error() also reaches the job's output file
 * ("slurmstepd: error: ..."), and the only persyst text a user may find in their output
 * is the digest. persyst's own faults are logged at info level there, into slurmd's and
 * slurmstepd's logs; in sbatch/srun/salloc errors are the user's to see. */
static int in_job(void)
{
	spank_context_t ctx = spank_context();

	return ctx == S_CTX_REMOTE || ctx == S_CTX_JOB_SCRIPT || ctx == S_CTX_SLURMD;
}

/* log_error logs one of persyst's faults where its reader is (see in_job). */
static void log_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void log_error(const char *fmt, ...)
{
	char msg[1600];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (in_job())
		slurm_info("persyst: %s", msg);
	else
		slurm_error("persyst: %s", msg);
}

static void config_error(void *arg, const char *msg)
{
	(void)arg;
	log_error("plugstack.conf: %s", msg);
}

/* configure parses the plugstack.conf arguments; 0 when they are all valid. */
static int configure(int ac, char **av)
{
	configured = persyst_parse_args(ac, av, &cfg, config_error, NULL) == 0;
	return configured ? 0 : -1;
}

/* parse_option parses a --persyst value, saying what is wrong with a bad one. */
static int parse_option(const char *v)
{
	int on = persyst_parse_value(v);

	if (on < 0) {
		char q[80];
		size_t i, o = 0;

		/* the value as typed, printable characters only */
		for (i = 0; v[i] && o < sizeof(q) - 4; i++)
			q[o++] = (v[i] >= 0x20 && v[i] < 0x7f) ? v[i] : '?';
		if (v[i])
			q[o++] = '.', q[o++] = '.', q[o++] = '.';
		q[o] = '\0';
		log_error("--persyst: invalid value \"%s\": use on or off", q);
	}
	return on;
}

/* set_join hands the task hook the cgroup the daemon wants the step's tasks in. Only a
 * clean absolute path is accepted; task_post_fork opens <dir>/cgroup.procs with O_NOFOLLOW. */
static void set_join(const char *dir)
{
	size_t len = strlen(dir);

	join_procs[0] = '\0';
	if (len == 0)
		return;
	if (dir[0] != '/' || len > 3000 || strstr(dir, "//") || strstr(dir, "/./") || strstr(dir, "/../") ||
	    (len >= 2 && strcmp(dir + len - 2, "/.") == 0) || (len >= 3 && strcmp(dir + len - 3, "/..") == 0) ||
	    (len > 1 && dir[len - 1] == '/')) {
		log_error("daemon sent an unusable cgroup path; tasks not moved");
		return;
	}
	if (snprintf(join_procs, sizeof(join_procs), "%s/cgroup.procs", dir) >= (int)sizeof(join_procs))
		join_procs[0] = '\0';
}

/* task_post_fork runs in slurmstepd, the tasks' parent, after each task was forked and
 * before it execs (the task waits for slurmstepd to finish this hook). It moves the task
 * into persyst's cgroup for the job, so perf events in cgroup mode count it and
 * everything it starts. Done from the parent, not from task_init_privileged in the task,
 * so that this write(2) is not counted as the job's own I/O. Failure is logged and
 * ignored: the task runs unmeasured by perf, never harmed. */
int slurm_spank_task_post_fork(spank_t sp, int ac, char **av)
{
	char buf[32];
	pid_t pid = 0;
	int fd, n;

	(void)ac;
	(void)av;
	if (plugin_disabled || join_procs[0] == '\0')
		return ESPANK_SUCCESS;
	if (spank_get_item(sp, S_TASK_PID, &pid) != ESPANK_SUCCESS || pid <= 0)
		return ESPANK_SUCCESS;
	fd = open(join_procs, O_WRONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0) {
		slurm_info("persyst: task %d not measured by perf: open %s: %s", (int)pid, join_procs, strerror(errno));
		return ESPANK_SUCCESS;
	}
	n = snprintf(buf, sizeof(buf), "%d", (int)pid);
	if (write(fd, buf, n) != n)
		slurm_info("persyst: task %d not measured by perf: write %s: %s", (int)pid, join_procs, strerror(errno));
	close(fd);
	return ESPANK_SUCCESS;
}

static int opt_cb(int val, const char *optarg, int remote)
{
	int v;

	(void)val;
	v = parse_option(optarg ? optarg : "");
	if (v < 0) {
		/* Locally (sbatch/srun/salloc) this rejects the job with a clear message.
		 * Remotely the value was already checked; never fail a step for it. */
		return remote ? 0 : -1;
	}
	opt_value = v;
	return 0;
}

/* Slurm reads a SPANK option from this variable (spank(7): options "by environment
 * variables"); users get the short PERSYST=on|off, mapped onto it in sbatch/srun/salloc. */
#define SLURM_OPTION_ENV "SLURM_SPANK__SLURM_SPANK_OPTION_persyst_persyst"
#define USER_OPTION_ENV "PERSYST"

int slurm_spank_init(spank_t sp, int ac, char **av)
{
	spank_context_t ctx = spank_context();
	const char *env;

	/* In sbatch/srun/salloc this runs before Slurm processes options from the
	 * environment, so the option callback validates PERSYST like --persyst. The
	 * command line still wins; Slurm's own variable, if set, is not overridden. */
	if ((ctx == S_CTX_ALLOCATOR || ctx == S_CTX_LOCAL) &&
	    (env = getenv(USER_OPTION_ENV)) != NULL)
		setenv(SLURM_OPTION_ENV, env, 0);

	/* srun without SLURM_JOB_ID in its environment makes its own allocation: an
	 * interactive job, whose digest srun prints when it ends (slurm_spank_exit). */
	if (ctx == S_CTX_LOCAL && getenv("SLURM_JOB_ID") == NULL)
		srun_alone = 1;
	if (ctx != S_CTX_SLURMD)
		spank_option_register(sp, &persyst_option);
	if (configure(ac, av) != 0) {
		plugin_disabled = 1;
		if (in_job())
			slurm_info("persyst: plugin disabled because of the errors above in plugstack.conf; jobs run unmonitored");
	}
	return ESPANK_SUCCESS;
}

/* option_value returns the --persyst value where the hook can see it. */
static int option_value(spank_t sp)
{
	char *arg = NULL;

	if (opt_value >= 0)
		return opt_value;
	if (spank_option_getopt(sp, &persyst_option, &arg) == ESPANK_SUCCESS && arg)
		return persyst_parse_value(arg);
	return -1;
}

/* fill_common reads the items available in both remote and job_script contexts.
 * It deliberately sends no node name: in slurmstepd the only source is the job's
 * environment, which the user controls. The daemon knows its own node. */
static void fill_common(spank_t sp, struct persyst_event *ev)
{
	uid_t uid = 0;
	gid_t gid = 0;

	memset(ev, 0, sizeof(*ev));
	spank_get_item(sp, S_JOB_ID, &ev->job_id);
	if (spank_get_item(sp, S_JOB_UID, &uid) == ESPANK_SUCCESS)
		ev->uid = uid;
	if (spank_get_item(sp, S_JOB_GID, &gid) == ESPANK_SUCCESS)
		ev->gid = gid;
	spank_get_item(sp, S_JOB_ARRAY_ID, &ev->array_job_id);
	spank_get_item(sp, S_JOB_ARRAY_TASK_ID, &ev->array_task_id);
	ev->option = option_value(sp);
}

static void fill_step(spank_t sp, struct persyst_event *ev)
{
	uint16_t ncpus = 0;
	char *cores = NULL;

	ev->has_step = spank_get_item(sp, S_JOB_STEPID, &ev->step_id) == ESPANK_SUCCESS;
	spank_get_item(sp, S_JOB_NODEID, &ev->node_id);
	spank_get_item(sp, S_JOB_NNODES, &ev->nnodes);
	spank_get_item(sp, S_JOB_LOCAL_TASK_COUNT, &ev->local_tasks);
	spank_get_item(sp, S_JOB_TOTAL_TASK_COUNT, &ev->total_tasks);
	if (spank_get_item(sp, S_JOB_NCPUS, &ncpus) == ESPANK_SUCCESS)
		ev->ncpus = ncpus;
	if (spank_get_item(sp, S_JOB_ALLOC_CORES, &cores) == ESPANK_SUCCESS)
		ev->job_cores = cores;
	cores = NULL;
	if (spank_get_item(sp, S_STEP_ALLOC_CORES, &cores) == ESPANK_SUCCESS)
		ev->step_cores = cores;
	spank_get_item(sp, S_JOB_ALLOC_MEM, &ev->job_mem_mb);
	spank_get_item(sp, S_STEP_ALLOC_MEM, &ev->step_mem_mb);
}

/* fastTimeout is how long later events wait once the daemon failed to answer: a healthy
 * daemon answers in about a millisecond, so this only bounds the cost of a hung one. */
#define FAST_TIMEOUT_NS 200000000LL
/* A marker younger than this says the daemon was found unreachable. */
#define MARKER_TTL 600

/* The marker records, for every process on this node, that the daemon did not answer:
 * the job prolog, each slurmstepd and the epilog are separate processes, and without it
 * each would wait the full timeout and log the same failure. It lives next to the
 * socket, in the daemon's root-owned run directory. */
static void marker_path(char *buf, size_t n)
{
	snprintf(buf, n, "%s.unreachable", cfg.socket);
}

/* marked says whether a marker's stat is of one written within MARKER_TTL. */
static int marked(const struct stat *st)
{
	return S_ISREG(st->st_mode) && time(NULL) - st->st_mtime < MARKER_TTL;
}

static int marker_fresh(const char *path)
{
	struct stat st;

	return lstat(path, &st) == 0 && marked(&st);
}

static const char *kind_label(int kind)
{
	switch (kind) {
	case PERSYST_JOB_START: return "job_start";
	case PERSYST_STEP_START: return "step_start";
	case PERSYST_STEP_END: return "step_end";
	}
	return "job_end";
}

/* persyst_mark_unreachable writes note into the marker and says whether this process is
 * the first to find the daemon unreachable. Processes that fail at the same moment (the
 * prolog and a slurmstepd start together) each saw no marker before they tried; under
 * the marker's lock only one finds it empty or stale, and only that one logs. A lock
 * held by another process means that one is marking (and logs if first); a marker that
 * cannot be opened or locked says "first": a failure logged twice beats one not logged.
 * O_NOFOLLOW: never follow a link planted in place of the marker. */
int persyst_mark_unreachable(const char *marker, const char *note)
{
	struct stat st;
	int fd, first = 1;

	fd = open(marker, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0)
		return 1;
	if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
		first = errno != EWOULDBLOCK;
		close(fd);
		return first;
	}
	if (fstat(fd, &st) == 0 && st.st_size > 0 && marked(&st))
		first = 0;
	if (ftruncate(fd, 0) == 0)
		dprintf(fd, "%s\n", note);
	close(fd); /* and the lock with it */
	return first;
}

/* job_step names a job or step the way Slurm's logs do: "job 7" or "step 7.batch". */
static const char *job_step(const struct persyst_event *ev, char *buf, size_t n)
{
	char step[16];

	if (!ev->has_step)
		snprintf(buf, n, "job %u", ev->job_id);
	else
		snprintf(buf, n, "step %u.%s", ev->job_id, persyst_step_name(ev->step_id, step, sizeof(step)));
	return buf;
}

/* elapsed_ms is the time since t0, in milliseconds. */
static double elapsed_ms(const struct timespec *t0)
{
	struct timespec t1;

	clock_gettime(CLOCK_MONOTONIC, &t1);
	return (double)(t1.tv_sec - t0->tv_sec) * 1e3 + (double)(t1.tv_nsec - t0->tv_nsec) / 1e6;
}

/* send_event sends one lifecycle event to the node daemon. */
static void send_event(int kind, struct persyst_event *ev)
{
	char marker[PERSYST_SOCKET_MAX + 16], name[64], why[700], *msg;
	struct persyst_reply *rep = NULL;
	struct timespec now, t0;
	int64_t timeout = cfg.timeout_ns;
	int known, len, rc, deliver_only;

	if (!configured)
		return;
	marker_path(marker, sizeof(marker));
	known = marker_fresh(marker);
	if (known && timeout > FAST_TIMEOUT_NS)
		timeout = FAST_TIMEOUT_NS;
	job_step(ev, name, sizeof(name));
	msg = malloc(PERSYST_MAX_MESSAGE + 2);
	if (msg == NULL)
		return;
	clock_gettime(CLOCK_REALTIME, &now);
	len = persyst_encode(msg, PERSYST_MAX_MESSAGE + 2, kind, ev, cfg.default_on, &now);
	if (len < 0) {
		log_error("%s: %s event not sent: longer than %d bytes", name, kind_label(kind), PERSYST_MAX_MESSAGE);
		free(msg);
		return;
	}
	clock_gettime(CLOCK_MONOTONIC, &t0);
	/* The batch step's end waits: the daemon writes the digest into the job's output file
	 * before replying, and the job is complete only after this hook returns. Other end
	 * events are delivered, not called: slurmctld releases a step's resources on a node
	 * only after slurm_spank_exit returns there, and a next srun that finds them still
	 * busy backs off for about a minute. The daemon reads the event when it can. */
	deliver_only = kind == PERSYST_JOB_END ||
		       (kind == PERSYST_STEP_END && ev->step_id != 0xfffffffbU);
	why[0] = '\0';
	if (deliver_only) {
		rc = persyst_deliver(cfg.socket, msg, (size_t)len, timeout, why, sizeof(why));
	} else {
		rep = malloc(sizeof(*rep));
		if (rep == NULL) {
			free(msg);
			return;
		}
		rc = persyst_call(cfg.socket, msg, (size_t)len, timeout, rep, why, sizeof(why));
		/* Start events wait for the daemon: it prepares before the tasks start. */
		if (rc == PERSYST_SENT && kind == PERSYST_STEP_START) {
			if (rep->error[0])
				log_error("%s: daemon sent an unusable cgroup path; tasks not moved", name);
			set_join(rep->cgroup);
		}
	}
	free(msg);
	free(rep);
	if (rc == PERSYST_REFUSED) {
		/* The daemon is up and refused the event (a bad field, a version mismatch):
		 * say so, and do not mark it unreachable. */
		log_error("%s: %s event refused by the daemon: %s", name, kind_label(kind), why);
		if (known || daemon_failed) {
			unlink(marker);
			daemon_failed = 0;
		}
		return;
	}
	if (rc != PERSYST_SENT) {
		char note[sizeof(why) + 64];

		slurm_debug("persyst: %s: %s not sent after %.3fms: %s", name, kind_label(kind),
			    elapsed_ms(&t0), why);

		snprintf(note, sizeof(note), "%ld job %u %s: %s", (long)time(NULL), ev->job_id, kind_label(kind), why);
		if (persyst_mark_unreachable(marker, note) && !known && !daemon_failed)
			log_error("%s: %s event not recorded: %s (the job is not affected; until the daemon answers again, events wait at most %d ms and are not logged)",
				  name, kind_label(kind), why, (int)(FAST_TIMEOUT_NS / 1000000));
		daemon_failed = 1;
		return;
	}
	/* Only an answer proves the daemon is back; a delivered request may sit unread. */
	if (!deliver_only && (known || daemon_failed)) {
		slurm_info("persyst: job %u: daemon at %s answers again", ev->job_id, cfg.socket);
		unlink(marker);
		daemon_failed = 0;
	}
	slurm_debug("persyst: %s: %s sent in %.3fms", name, kind_label(kind),
		    elapsed_ms(&t0));
}

/* reportWait bounds how long srun waits at the end of an interactive job for its digest;
 * the command gets 2 s more to print it. */
#define REPORT_WAIT "5s"
#define REPORT_DEADLINE_MS 7000
#define REPORT_MAX (1 << 20)

/* print_report prints the digest of the interactive job srun started, on srun's standard
 * error (the user's terminal), with the persyst command plugstack.conf names (report=).
 * Nothing is printed when the job opted out, when there is no digest in time, or when
 * anything fails: persyst's own faults are logged at debug level. */
static void print_report(uint32_t job, int option)
{
	posix_spawn_file_actions_t fa;
	char id[16], *argv[6], *buf = NULL;
	struct timespec t0, t;
	int p[2] = { -1, -1 }, status = 0, spawned = 0, overflow = 0, rc;
	size_t got = 0;
	pid_t pid = -1;

	if (!configured || cfg.report[0] == '\0' || job == 0 || option == 0 || (option < 0 && !cfg.default_on))
		return;
	snprintf(id, sizeof(id), "%u", job);
	argv[0] = cfg.report;
	argv[1] = "report";
	argv[2] = "--wait";
	argv[3] = REPORT_WAIT;
	argv[4] = id;
	argv[5] = NULL;
	if (pipe2(p, O_CLOEXEC) != 0 || (buf = malloc(REPORT_MAX)) == NULL)
		goto out;
	if (posix_spawn_file_actions_init(&fa) != 0)
		goto out;
	posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
	posix_spawn_file_actions_adddup2(&fa, p[1], 1);
	posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
	rc = posix_spawn(&pid, cfg.report, &fa, NULL, argv, environ);
	posix_spawn_file_actions_destroy(&fa);
	if (rc != 0) {
		slurm_debug("persyst: job %u: no digest to print: %s: %s", job, cfg.report, strerror(rc));
		goto out;
	}
	spawned = 1;
	close(p[1]);
	p[1] = -1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;;) {
		struct pollfd pf = { p[0], POLLIN, 0 };
		long left;
		ssize_t r;

		clock_gettime(CLOCK_MONOTONIC, &t);
		left = REPORT_DEADLINE_MS - ((t.tv_sec - t0.tv_sec) * 1000L + (t.tv_nsec - t0.tv_nsec) / 1000000L);
		if (left <= 0) {
			kill(pid, SIGKILL);
			got = 0;
			slurm_debug("persyst: job %u: no digest to print: %s did not finish in time", job, cfg.report);
			break;
		}
		if (poll(&pf, 1, (int)left) < 0 && errno != EINTR)
			break;
		if (got < REPORT_MAX) {
			r = read(p[0], buf + got, REPORT_MAX - got);
			if (r > 0)
				got += (size_t)r;
		} else {
			char drop[4096];

			/* Longer than any digest: read to the end, print nothing. */
			r = read(p[0], drop, sizeof(drop));
			if (r > 0)
				overflow = 1;
		}
		if (r > 0)
			continue;
		if (r == 0 || (errno != EAGAIN && errno != EINTR))
			break;
	}
out:
	if (spawned) {
		while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
			;
		if (WIFEXITED(status) && WEXITSTATUS(status) == 0 && got > 0 && !overflow) {
			size_t off = 0;

			while (off < got) {
				ssize_t w = write(2, buf + off, got - off);

				if (w <= 0)
					break;
				off += (size_t)w;
			}
		} else if (got > 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
			slurm_debug("persyst: job %u: no digest to print (%s exit status %d)", job, cfg.report, status);
		}
	}
	if (p[0] >= 0)
		close(p[0]);
	if (p[1] >= 0)
		close(p[1]);
	free(buf);
}

int slurm_spank_init_post_opt(spank_t sp, int ac, char **av)
{
	struct persyst_event ev;

	(void)ac;
	(void)av;
	if (plugin_disabled || !spank_remote(sp))
		return ESPANK_SUCCESS;
	fill_common(sp, &ev);
	fill_step(sp, &ev);
	/* slurmstepd has put itself into the job's cgroups: the daemon finds them from this
	 * connection's peer (SO_PEERCRED). */
	if (ev.has_step)
		send_event(PERSYST_STEP_START, &ev);
	return ESPANK_SUCCESS;
}

/* task_exit runs in slurmstepd once per task. Keep the first failing status (or 0 when
 * every task succeeded). */
int slurm_spank_task_exit(spank_t sp, int ac, char **av)
{
	int status = 0;

	(void)ac;
	(void)av;
	if (spank_get_item(sp, S_TASK_EXIT_STATUS, &status) != ESPANK_SUCCESS)
		return ESPANK_SUCCESS;
	if (!exit_status_known || (exit_status == 0 && status != 0))
		exit_status = status;
	exit_status_known = 1;
	return ESPANK_SUCCESS;
}

int slurm_spank_exit(spank_t sp, int ac, char **av)
{
	struct persyst_event ev;
	uint32_t job_id = 0;
	const char *env;

	(void)ac;
	(void)av;
	if (plugin_disabled)
		return ESPANK_SUCCESS;
	if (spank_context() == S_CTX_LOCAL && srun_alone) {
		/* The interactive job srun started is over: its digest, on the terminal. */
		if (spank_get_item(sp, S_JOB_ID, &job_id) != ESPANK_SUCCESS || job_id == 0) {
			env = getenv("SLURM_JOB_ID");
			job_id = env ? (uint32_t)strtoul(env, NULL, 10) : 0;
		}
		if (job_id != 0)
			print_report(job_id, option_value(sp));
		return ESPANK_SUCCESS;
	}
	if (!spank_remote(sp))
		return ESPANK_SUCCESS;
	fill_common(sp, &ev);
	fill_step(sp, &ev);
	ev.has_exit = exit_status_known;
	ev.exit_status = exit_status;
	if (ev.has_step)
		send_event(PERSYST_STEP_END, &ev);
	return ESPANK_SUCCESS;
}

/* job_gpus returns the job's GPUs on this node from the prolog's environment, which
 * slurmd builds from the job's credential (SLURM_JOB_GPUS: GRES indices, "0,2"; MIG
 * instances by UUID from CUDA_VISIBLE_DEVICES); the
 * job's own environment, which its user controls, is never read for it. NULL when the
 * job has none or the value is not a plain list. */
static const char *job_gpus(void)
{
	/* MIG instances: their UUIDs ("MIG-…"), which slurmd puts in the prolog's
	 * CUDA_VISIBLE_DEVICES, name them exactly; GRES indices do not. */
	const char *v = getenv("CUDA_VISIBLE_DEVICES");
	int uuids = v != NULL && strstr(v, "MIG-") != NULL;

	if (!uuids)
		v = getenv("SLURM_JOB_GPUS");
	if (v == NULL || v[0] == '\0' || strlen(v) > 1024)
		return NULL;
	for (const char *p = v; *p; p++) {
		int ok = (*p >= '0' && *p <= '9') || *p == ',' || *p == '-';
		if (uuids)
			ok = ok || (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || *p == '/';
		if (!ok)
			return NULL;
	}
	return v;
}

/* job_script_event sends a job event from the prolog or epilog (job_script context), where
 * slurm_spank_init is not called: the plugin configures itself here. */
static int job_script_event(spank_t sp, int ac, char **av, int kind)
{
	struct persyst_event ev;

	if (configure(ac, av) != 0)
		return ESPANK_SUCCESS;
	fill_common(sp, &ev);
	if (kind == PERSYST_JOB_START)
		ev.gpus = job_gpus();
	send_event(kind, &ev);
	return ESPANK_SUCCESS;
}

int slurm_spank_job_prolog(spank_t sp, int ac, char **av)
{
	return job_script_event(sp, ac, av, PERSYST_JOB_START);
}

int slurm_spank_job_epilog(spank_t sp, int ac, char **av)
{
	return job_script_event(sp, ac, av, PERSYST_JOB_END);
}
