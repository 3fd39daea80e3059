/*
 * plugin.c — the SPANK side of persyst (C first, like pyxis).
 *
 * This file owns every SPANK symbol. Go is entered only from hooks that run in a
 * process which has not forked off a task: the option callback and slurm_spank_init
 * (sbatch/srun/salloc/slurmstepd/prolog), slurm_spank_init_post_opt and
 * slurm_spank_exit (slurmstepd), and slurm_spank_job_prolog/_epilog (job_script context).
 * The task hooks (task_post_fork, task_exit) are plain C and never enter the Go runtime:
 * task_post_fork moves a new task into persyst's cgroup, task_exit records the exit
 * status for slurm_spank_exit to send.
 *
 * Failures never fail a job: every hook returns 0 (ESPANK_SUCCESS) except the option
 * callback, which rejects a bad --persyst value in sbatch/srun/salloc, before the job exists.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/types.h>

#include <slurm/slurm.h>
#include <slurm/spank.h>

#include "persyst.h"
#include "_cgo_export.h"

/* SPANK_PLUGIN defines plugin_name, plugin_type and plugin_version. */
SPANK_PLUGIN(persyst, 1);


#define OPT_PERSYST 1

static int opt_value = -1;    /* -1: not given, 0: off, 1: on */
static int plugin_disabled;   /* a plugstack.conf argument was wrong */
static int exit_status_known;
static int exit_status;
static int srun_alone;        /* srun started its own job (not inside sbatch or salloc) */

static int opt_cb(int val, const char *optarg, int remote);

/* The cgroup.procs file of the cgroup the daemon created for this job, set before the
 * tasks fork (see persyst_set_join); tasks write their pid there. */
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

void persyst_log(int level, const char *msg)
{
	switch (level) {
	case PERSYST_LOG_ERROR:
		if (in_job())
			slurm_info("%s", msg);
		else
			slurm_error("%s", msg);
		break;
	case PERSYST_LOG_INFO:
		slurm_info("%s", msg);
		break;
	case PERSYST_LOG_VERBOSE:
		slurm_verbose("%s", msg);
		break;
	default:
		slurm_debug("%s", msg);
		break;
	}
}

void persyst_set_join(const char *dir)
{
	join_procs[0] = '\0';
	if (dir == NULL || dir[0] != '/')
		return;
	if (snprintf(join_procs, sizeof(join_procs), "%s/cgroup.procs", dir) >= (int)sizeof(join_procs))
		join_procs[0] = '\0';
}

/* task_post_fork runs in slurmstepd, the tasks' parent, after each task was forked and
 * before it execs (the task waits for slurmstepd to finish this hook): plain C. It moves
 * the task into persyst's cgroup for the job, so perf events in cgroup mode count it and
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
	v = persystParseValue((char *)(optarg ? optarg : ""));
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
	if (persystConfigure(ac, av) != 0) {
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
		return persystParseValue(arg) < 0 ? -1 : persystParseValue(arg);
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

int slurm_spank_init_post_opt(spank_t sp, int ac, char **av)
{
	struct persyst_event ev;

	(void)ac;
	(void)av;
	if (plugin_disabled || !spank_remote(sp))
		return ESPANK_SUCCESS;
	fill_common(sp, &ev);
	fill_step(sp, &ev);
	if (ev.has_step)
		persystSend(PERSYST_STEP_START, &ev);
	return ESPANK_SUCCESS;
}

/* task_exit runs in slurmstepd once per task; C only. Keep the first failing status
 * (or 0 when every task succeeded). */
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
			persystPrintReport(job_id, option_value(sp));
		return ESPANK_SUCCESS;
	}
	if (!spank_remote(sp))
		return ESPANK_SUCCESS;
	fill_common(sp, &ev);
	fill_step(sp, &ev);
	ev.has_exit = exit_status_known;
	ev.exit_status = exit_status;
	if (ev.has_step)
		persystSend(PERSYST_STEP_END, &ev);
	return ESPANK_SUCCESS;
}

/* job_script_event sends a job event from the prolog or epilog (job_script context), where
 * slurm_spank_init is not called: the plugin configures itself here. */
static int job_script_event(spank_t sp, int ac, char **av, int kind)
{
	struct persyst_event ev;

	if (persystConfigure(ac, av) != 0)
		return ESPANK_SUCCESS;
	fill_common(sp, &ev);
	persystSend(kind, &ev);
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
