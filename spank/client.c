/* client.c — the plugin's side of the wire protocol to the node daemon (daemon/wire):
 * one JSON request line and one JSON reply line per unix-socket connection. Plain libc,
 * no threads, no signals: it runs inside slurmstepd, srun and the prolog/epilog.
 *
 * Every exchange is bounded by a deadline (poll), never raises SIGPIPE (MSG_NOSIGNAL),
 * and never leaves a descriptor behind (SOCK_CLOEXEC, closed on every path). */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/socket.h>
#include <sys/un.h>

#include "persyst.h"

const char *persyst_step_name(uint32_t id, char *buf, size_t n)
{
	switch (id) {
	case 0xfffffffbU: return "batch";
	case 0xfffffffcU: return "extern";
	case 0xfffffffaU: return "interactive";
	}
	snprintf(buf, n, "%u", id);
	return buf;
}

/* out is a bounded string builder: once full it stays failed. */
struct out {
	char *buf;
	size_t n, len;
	int full;
};

static void put(struct out *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void put(struct out *o, const char *fmt, ...)
{
	va_list ap;
	int w;

	if (o->full)
		return;
	va_start(ap, fmt);
	w = vsnprintf(o->buf + o->len, o->n - o->len, fmt, ap);
	va_end(ap);
	if (w < 0 || (size_t)w >= o->n - o->len) {
		o->full = 1;
		return;
	}
	o->len += (size_t)w;
}

/* put_string writes s as a JSON string: quotes, backslashes and control bytes escaped. */
static void put_string(struct out *o, const char *s)
{
	put(o, "\"");
	for (; *s && !o->full; s++) {
		unsigned char ch = (unsigned char)*s;

		if (ch == '"' || ch == '\\')
			put(o, "\\%c", ch);
		else if (ch < 0x20 || ch == 0x7f)
			put(o, "\\u%04x", ch);
		else
			put(o, "%c", ch);
	}
	put(o, "\"");
}

static const char *kind_name(int kind)
{
	switch (kind) {
	case PERSYST_JOB_START: return "job_start";
	case PERSYST_STEP_START: return "step_start";
	case PERSYST_STEP_END: return "step_end";
	case PERSYST_JOB_END: return "job_end";
	}
	return NULL;
}

int persyst_encode(char *buf, size_t n, int kind, const struct persyst_event *ev,
		   int default_on, const struct timespec *now)
{
	struct out o = { buf, n, 0, 0 };
	const char *k = kind_name(kind);
	char step[16], stamp[64];
	uint32_t array_job = ev->array_job_id, array_task = ev->array_task_id;
	struct tm tm;
	int on;

	if (k == NULL || n == 0)
		return -1;
	/* Slurm reports array_task_id NO_VAL (0xfffffffe) and array_job_id = job id for
	 * jobs that are not array tasks. */
	if (array_task >= 0xfffffffeU)
		array_job = array_task = 0;
	on = ev->option == 1 || (ev->option < 0 && default_on);
	if (gmtime_r(&now->tv_sec, &tm) == NULL)
		return -1;
	snprintf(stamp, sizeof(stamp), "%04d-%02d-%02dT%02d:%02d:%02d.%09ldZ",
		 tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
		 (long)now->tv_nsec);

	put(&o, "{\"v\":%d,\"kind\":\"%s\",\"event\":{\"job_id\":%u", PERSYST_WIRE_VERSION, k, ev->job_id);
	if (ev->has_step)
		put(&o, ",\"step_id\":\"%s\"", persyst_step_name(ev->step_id, step, sizeof(step)));
	if (array_job)
		put(&o, ",\"array_job_id\":%u", array_job);
	if (array_task)
		put(&o, ",\"array_task_id\":%u", array_task);
	put(&o, ",\"uid\":%u,\"gid\":%u", ev->uid, ev->gid);
	if (ev->node_id)
		put(&o, ",\"node_id\":%u", ev->node_id);
	if (ev->nnodes)
		put(&o, ",\"nnodes\":%u", ev->nnodes);
	if (ev->local_tasks)
		put(&o, ",\"local_tasks\":%u", ev->local_tasks);
	if (ev->total_tasks)
		put(&o, ",\"total_tasks\":%u", ev->total_tasks);
	if (ev->ncpus)
		put(&o, ",\"ncpus\":%u", ev->ncpus);
	if (ev->job_cores && ev->job_cores[0]) {
		put(&o, ",\"job_cores\":");
		put_string(&o, ev->job_cores);
	}
	if (ev->step_cores && ev->step_cores[0]) {
		put(&o, ",\"step_cores\":");
		put_string(&o, ev->step_cores);
	}
	if (ev->gpus && ev->gpus[0]) {
		put(&o, ",\"gpus\":");
		put_string(&o, ev->gpus);
	}
	if (ev->job_mem_mb)
		put(&o, ",\"job_mem_mb\":%llu", (unsigned long long)ev->job_mem_mb);
	if (ev->step_mem_mb)
		put(&o, ",\"step_mem_mb\":%llu", (unsigned long long)ev->step_mem_mb);
	put(&o, ",\"persyst\":\"%s\"", on ? "on" : "off");
	if (ev->has_exit)
		put(&o, ",\"exit_status\":%d", ev->exit_status);
	put(&o, ",\"time\":\"%s\"}}\n", stamp);
	if (o.full || o.len > PERSYST_MAX_MESSAGE + 1)
		return -1;
	return (int)o.len;
}

/* ---- reply parsing: a minimal JSON reader for one object of the daemon's reply ---- */

struct in {
	const char *p, *end;
};

static void skip_ws(struct in *in)
{
	while (in->p < in->end && (*in->p == ' ' || *in->p == '\t' || *in->p == '\r' || *in->p == '\n'))
		in->p++;
}

static int hexval(char c)
{
	if (c >= '0' && c <= '9') return c - '0';
	if (c >= 'a' && c <= 'f') return c - 'a' + 10;
	if (c >= 'A' && c <= 'F') return c - 'A' + 10;
	return -1;
}

/* read_string reads a JSON string into out (NUL-terminated, cut at n-1 bytes; *plain is
 * cleared when it held anything but printable ASCII or was cut). out may be NULL. */
static int read_string(struct in *in, char *out, size_t n, int *plain)
{
	size_t o = 0;

	if (in->p >= in->end || *in->p != '"')
		return -1;
	in->p++;
	while (in->p < in->end) {
		unsigned char ch = (unsigned char)*in->p++;
		int u = -1, i;

		if (ch == '"') {
			if (out && n)
				out[o < n ? o : n - 1] = '\0';
			return 0;
		}
		if (ch < 0x20)
			return -1;
		if (ch == '\\') {
			if (in->p >= in->end)
				return -1;
			ch = (unsigned char)*in->p++;
			switch (ch) {
			case '"': case '\\': case '/': u = ch; break;
			case 'b': u = '\b'; break;
			case 'f': u = '\f'; break;
			case 'n': u = '\n'; break;
			case 'r': u = '\r'; break;
			case 't': u = '\t'; break;
			case 'u':
				if (in->end - in->p < 4)
					return -1;
				u = 0;
				for (i = 0; i < 4; i++) {
					int h = hexval(in->p[i]);

					if (h < 0)
						return -1;
					u = u * 16 + h;
				}
				in->p += 4;
				break;
			default:
				return -1;
			}
			ch = u > 0x7e ? '?' : (unsigned char)u;
			if (u > 0x7e && plain)
				*plain = 0;
		}
		if ((ch < 0x20 || ch > 0x7e) && plain)
			*plain = 0;
		if (out && n) {
			if (o < n - 1)
				out[o++] = (char)ch;
			else if (plain)
				*plain = 0;
		}
	}
	return -1;
}

static int skip_value(struct in *in, int depth);

static int skip_container(struct in *in, char close, int depth)
{
	in->p++;
	skip_ws(in);
	if (in->p < in->end && *in->p == close) {
		in->p++;
		return 0;
	}
	for (;;) {
		skip_ws(in);
		if (close == '}') {
			if (read_string(in, NULL, 0, NULL) < 0)
				return -1;
			skip_ws(in);
			if (in->p >= in->end || *in->p != ':')
				return -1;
			in->p++;
			skip_ws(in);
		}
		if (skip_value(in, depth + 1) < 0)
			return -1;
		skip_ws(in);
		if (in->p >= in->end)
			return -1;
		if (*in->p == ',') {
			in->p++;
			continue;
		}
		if (*in->p == close) {
			in->p++;
			return 0;
		}
		return -1;
	}
}

static int skip_value(struct in *in, int depth)
{
	if (in->p >= in->end || depth > 64)
		return -1;
	switch (*in->p) {
	case '"':
		return read_string(in, NULL, 0, NULL);
	case '{':
		return skip_container(in, '}', depth);
	case '[':
		return skip_container(in, ']', depth);
	}
	/* a number or a literal: up to the next delimiter */
	if (strchr("-0123456789tfn", *in->p) == NULL)
		return -1;
	while (in->p < in->end && strchr(",}] \t\r\n", *in->p) == NULL)
		in->p++;
	return 0;
}

static int literal(struct in *in, const char *word)
{
	size_t l = strlen(word);

	if ((size_t)(in->end - in->p) < l || memcmp(in->p, word, l) != 0)
		return 0;
	in->p += l;
	return 1;
}

int persyst_parse_reply(const char *line, size_t n, struct persyst_reply *r,
			char *why, size_t whyn)
{
	struct in in = { line, line + n };
	char key[16];

	memset(r, 0, sizeof(*r));
	skip_ws(&in);
	if (in.p >= in.end || *in.p != '{')
		goto bad;
	in.p++;
	skip_ws(&in);
	if (in.p < in.end && *in.p == '}') {
		in.p++;
		goto end;
	}
	for (;;) {
		int plain = 1;

		skip_ws(&in);
		if (read_string(&in, key, sizeof(key), &plain) < 0)
			goto bad;
		skip_ws(&in);
		if (in.p >= in.end || *in.p != ':')
			goto bad;
		in.p++;
		skip_ws(&in);
		if (plain && strcmp(key, "ok") == 0) {
			if (literal(&in, "true"))
				r->ok = 1;
			else if (literal(&in, "false"))
				r->ok = 0;
			else
				goto bad;
		} else if (plain && strcmp(key, "error") == 0) {
			if (read_string(&in, r->error, sizeof(r->error), NULL) < 0)
				goto bad;
		} else if (plain && strcmp(key, "cgroup") == 0) {
			int ok = 1;

			if (read_string(&in, r->cgroup, sizeof(r->cgroup), &ok) < 0)
				goto bad;
			if (!ok)
				r->cgroup[0] = '\0', snprintf(r->error, sizeof(r->error), "unusable cgroup path");
		} else if (skip_value(&in, 0) < 0) {
			goto bad;
		}
		skip_ws(&in);
		if (in.p < in.end && *in.p == ',') {
			in.p++;
			continue;
		}
		if (in.p < in.end && *in.p == '}') {
			in.p++;
			break;
		}
		goto bad;
	}
end:
	skip_ws(&in);
	if (in.p != in.end)
		goto bad;
	return 0;
bad:
	snprintf(why, whyn, "not a reply: bad JSON at byte %ld", (long)(in.p - line));
	memset(r, 0, sizeof(*r));
	return -1;
}

/* ---- the exchange ---- */

static int64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* wait_fd polls fd for events until the deadline: 1 ready, 0 timed out, -1 error. */
static int wait_fd(int fd, short events, int64_t deadline)
{
	for (;;) {
		struct pollfd p = { fd, events, 0 };
		int64_t left = deadline - now_ns();
		int rc;

		if (left <= 0)
			return 0;
		rc = poll(&p, 1, (int)((left + 999999) / 1000000));
		if (rc > 0)
			return 1;
		if (rc == 0)
			continue; /* re-check the deadline */
		if (errno != EINTR)
			return -1;
	}
}

/* dial connects to the daemon's socket. A full listen backlog (EAGAIN: the daemon is
 * accepting a burst of connections) is retried within the deadline, as daemon/wire does. */
static int dial(const char *socket_path, int64_t deadline, char *why, size_t whyn, int *timedout)
{
	struct sockaddr_un sa;
	int64_t wait_ns = 2000000;
	int fd, try;

	memset(&sa, 0, sizeof(sa));
	sa.sun_family = AF_UNIX;
	if (strlen(socket_path) >= sizeof(sa.sun_path)) {
		snprintf(why, whyn, "dial unix %s: path too long", socket_path);
		return -1;
	}
	strcpy(sa.sun_path, socket_path);
	for (try = 0;; try++) {
		fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
		if (fd < 0) {
			snprintf(why, whyn, "dial unix %s: socket: %s", socket_path, strerror(errno));
			return -1;
		}
		if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0)
			return fd;
		if (errno == EINPROGRESS) {
			/* Not seen for unix sockets, but wait for it the portable way. */
			int err = 0;
			socklen_t l = sizeof(err);

			if (wait_fd(fd, POLLOUT, deadline) == 1 &&
			    getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &l) == 0 && err == 0)
				return fd;
			errno = err ? err : ETIMEDOUT;
		}
		snprintf(why, whyn, "dial unix %s: connect: %s", socket_path, strerror(errno));
		close(fd);
		if (errno != EAGAIN || try == 5)
			return -1;
		if (now_ns() + wait_ns >= deadline) {
			*timedout = 1;
			return -1;
		}
		{
			struct timespec ts = { 0, (long)wait_ns };

			nanosleep(&ts, NULL);
		}
		wait_ns *= 2;
	}
}

/* send_all writes len bytes within the deadline. */
static int send_all(int fd, const char *msg, size_t len, int64_t deadline, const char *socket_path,
		    char *why, size_t whyn, int *timedout)
{
	size_t off = 0;

	while (off < len) {
		ssize_t w = send(fd, msg + off, len - off, MSG_NOSIGNAL);

		if (w > 0) {
			off += (size_t)w;
			continue;
		}
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
			int rc = wait_fd(fd, POLLOUT, deadline);

			if (rc == 1)
				continue;
			if (rc == 0)
				*timedout = 1;
		}
		snprintf(why, whyn, "send to %s: %s", socket_path, *timedout ? "timed out" : strerror(errno));
		return -1;
	}
	return 0;
}

int persyst_deliver(const char *socket_path, const char *msg, size_t len, int64_t timeout_ns,
		    char *why, size_t whyn)
{
	int64_t deadline = now_ns() + timeout_ns;
	int timedout = 0, fd, rc;

	fd = dial(socket_path, deadline, why, whyn, &timedout);
	if (fd < 0)
		return timedout ? PERSYST_TIMEDOUT : PERSYST_FAILED;
	rc = send_all(fd, msg, len, deadline, socket_path, why, whyn, &timedout);
	close(fd);
	if (rc < 0)
		return timedout ? PERSYST_TIMEDOUT : PERSYST_FAILED;
	return PERSYST_SENT;
}

/* The longest reply line read: event replies are a few hundred bytes. */
#define REPLY_MAX (64 << 10)

int persyst_call(const char *socket_path, const char *msg, size_t len, int64_t timeout_ns,
		 struct persyst_reply *reply, char *why, size_t whyn)
{
	int64_t deadline = now_ns() + timeout_ns;
	int timedout = 0, fd, werr;
	char wwhy[256];
	char *buf;
	size_t got = 0;
	int result = PERSYST_FAILED;

	memset(reply, 0, sizeof(*reply));
	fd = dial(socket_path, deadline, why, whyn, &timedout);
	if (fd < 0)
		return timedout ? PERSYST_TIMEDOUT : PERSYST_FAILED;
	/* Even when the write fails, read: a daemon that refuses a peer answers and closes
	 * without reading the request, and its answer says why (EPIPE would not). */
	werr = send_all(fd, msg, len, deadline, socket_path, wwhy, sizeof(wwhy), &timedout);
	buf = malloc(REPLY_MAX + 1);
	if (buf == NULL) {
		snprintf(why, whyn, "reply from %s: out of memory", socket_path);
		goto out;
	}
	for (;;) {
		char *nl;
		ssize_t r;

		nl = got ? memchr(buf, '\n', got) : NULL;
		if (nl != NULL) {
			char pwhy[128];

			if (persyst_parse_reply(buf, (size_t)(nl - buf), reply, pwhy, sizeof(pwhy)) < 0) {
				snprintf(why, whyn, "reply from %s: %s", socket_path, pwhy);
				goto out;
			}
			if (!reply->ok) {
				snprintf(why, whyn, "daemon at %s: %s", socket_path, reply->error);
				result = PERSYST_REFUSED;
				goto out;
			}
			result = PERSYST_SENT;
			goto out;
		}
		if (got >= REPLY_MAX) {
			snprintf(why, whyn, "reply from %s: longer than %d bytes", socket_path, REPLY_MAX);
			goto out;
		}
		r = recv(fd, buf + got, REPLY_MAX - got, 0);
		if (r > 0) {
			got += (size_t)r;
			continue;
		}
		if (r == 0) {
			if (werr < 0)
				snprintf(why, whyn, "%s", wwhy);
			else if (got)
				snprintf(why, whyn, "reply from %s: cut short after %zu bytes", socket_path, got);
			else
				snprintf(why, whyn, "reply from %s: connection closed without a reply", socket_path);
			goto out;
		}
		if (errno == EINTR)
			continue;
		if (errno == EAGAIN || errno == EWOULDBLOCK) {
			int rc = wait_fd(fd, POLLIN, deadline);

			if (rc == 1)
				continue;
			if (rc == 0) {
				snprintf(why, whyn, "no answer from %s within %.3g s", socket_path, (double)timeout_ns / 1e9);
				result = PERSYST_TIMEDOUT;
				goto out;
			}
		}
		snprintf(why, whyn, "reply from %s: %s", socket_path, strerror(errno));
		goto out;
	}
out:
	free(buf);
	close(fd);
	return result;
}
