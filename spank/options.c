/* options.c — the plugstack.conf arguments and --persyst values, exactly as the Go
 * reference spank/options parses them (spank/spank_test.go checks both agree, message for
 * message). Strict key=value: default=on|off, socket=PATH, timeout=SECONDS, report=PATH|off. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "persyst.h"

#define KEYS "keys: default, socket, timeout, report"

void persyst_config_defaults(struct persyst_config *c)
{
	memset(c, 0, sizeof(*c));
	c->default_on = 1;
	strcpy(c->socket, PERSYST_DEFAULT_SOCKET);
	c->timeout_ns = PERSYST_DEFAULT_TIMEOUT_NS;
	strcpy(c->report, PERSYST_DEFAULT_REPORT);
}

int persyst_parse_value(const char *v)
{
	if (v == NULL)
		return -1;
	if (strcmp(v, "on") == 0)
		return 1;
	if (strcmp(v, "off") == 0)
		return 0;
	return -1;
}

/* quote writes s the way Go's %q does for ASCII (bytes above 0x7e as \xNN), cut short
 * with "..." when out is full. */
static void quote(char *out, size_t n, const char *s, size_t len)
{
	size_t o = 0, i;
	char esc[8];

	if (n < 8) {
		if (n)
			out[0] = '\0';
		return;
	}
	out[o++] = '"';
	for (i = 0; i < len; i++) {
		unsigned char ch = (unsigned char)s[i];

		switch (ch) {
		case '"': strcpy(esc, "\\\""); break;
		case '\\': strcpy(esc, "\\\\"); break;
		case '\a': strcpy(esc, "\\a"); break;
		case '\b': strcpy(esc, "\\b"); break;
		case '\f': strcpy(esc, "\\f"); break;
		case '\n': strcpy(esc, "\\n"); break;
		case '\r': strcpy(esc, "\\r"); break;
		case '\t': strcpy(esc, "\\t"); break;
		case '\v': strcpy(esc, "\\v"); break;
		default:
			if (ch < 0x20 || ch > 0x7e)
				snprintf(esc, sizeof(esc), "\\x%02x", ch);
			else {
				esc[0] = (char)ch;
				esc[1] = '\0';
			}
		}
		if (o + strlen(esc) + 5 > n) {
			memcpy(out + o, "...", 3);
			o += 3;
			break;
		}
		memcpy(out + o, esc, strlen(esc));
		o += strlen(esc);
	}
	out[o++] = '"';
	out[o] = '\0';
}

/* clean_abs says whether p is a clean absolute path other than "/" (Go: filepath.IsAbs,
 * filepath.Clean(p) == p) without a newline. */
static int clean_abs(const char *p)
{
	const char *c;
	size_t len = strlen(p);

	if (len < 2 || p[0] != '/' || p[len - 1] == '/' || strchr(p, '\n'))
		return 0;
	for (c = p; *c; c++) {
		if (*c != '/')
			continue;
		/* c starts a component: reject "", "." and "..". */
		if (c[1] == '/' || (c[1] == '.' && (c[2] == '/' || c[2] == '\0')) ||
		    (c[1] == '.' && c[2] == '.' && (c[3] == '/' || c[3] == '\0')))
			return 0;
	}
	return 1;
}

/* parse_seconds accepts a decimal number of seconds ("5", "0.5", ".5") between 0.001 and
 * 300; *ns gets it in nanoseconds, truncated like Go's time.Duration(f * 1e9). */
static int parse_seconds(const char *v, int64_t *ns)
{
	const char *c = v;
	int digits = 0, dots = 0;
	double f;

	for (; *c; c++) {
		if (*c >= '0' && *c <= '9')
			digits++;
		else if (*c == '.' && dots == 0)
			dots++;
		else
			return -1;
	}
	if (digits == 0 || c - v > 64)
		return -1;
	f = strtod(v, NULL);
	if (!(f <= 1e6)) /* far above the limit: no overflow converting below */
		return -2;
	*ns = (int64_t)(f * 1e9);
	if (*ns < 1000000 || *ns > PERSYST_MAX_TIMEOUT_NS)
		return -2;
	return 0;
}

/* seen_before says whether an earlier argument had the key k (of length kl). */
static int seen_before(char **av, int i, const char *k, size_t kl)
{
	int j;

	for (j = 0; j < i; j++) {
		const char *eq = av[j] ? strchr(av[j], '=') : NULL;

		if (eq && eq != av[j] && (size_t)(eq - av[j]) == kl && memcmp(av[j], k, kl) == 0)
			return 1;
	}
	return 0;
}

int persyst_parse_args(int ac, char **av, struct persyst_config *c,
		       void (*errf)(void *arg, const char *msg), void *arg)
{
	char q[600], kq[300], vq[300], msg[1400];
	int i, errs = 0;

	persyst_config_defaults(c);
	for (i = 0; i < ac; i++) {
		const char *a = av[i] ? av[i] : "";
		const char *eq = strchr(a, '=');
		const char *v;
		size_t kl;

		msg[0] = '\0';
		quote(q, sizeof(q), a, strlen(a));
		if (eq == NULL || eq == a) {
			snprintf(msg, sizeof(msg), "argument %s: want key=value (" KEYS ")", q);
			goto bad;
		}
		kl = (size_t)(eq - a);
		v = eq + 1;
		quote(kq, sizeof(kq), a, kl);
		if (seen_before(av, i, a, kl)) {
			snprintf(msg, sizeof(msg), "argument %s: %.*s given twice", q, (int)(kl > 200 ? 200 : kl), a);
			goto bad;
		}
		if (kl == 7 && memcmp(a, "default", 7) == 0) {
			int on = persyst_parse_value(v);

			if (on < 0) {
				quote(vq, sizeof(vq), v, strlen(v));
				snprintf(msg, sizeof(msg), "argument %s: invalid value %s: use on or off", q, vq);
				goto bad;
			}
			c->default_on = on;
		} else if (kl == 6 && memcmp(a, "socket", 6) == 0) {
			if (!clean_abs(v)) {
				snprintf(msg, sizeof(msg), "argument %s: socket must be a clean absolute path", q);
				goto bad;
			}
			if (strlen(v) > PERSYST_SOCKET_MAX) {
				snprintf(msg, sizeof(msg), "argument %s: socket path longer than %d bytes (the unix socket limit)", q, PERSYST_SOCKET_MAX);
				goto bad;
			}
			strcpy(c->socket, v);
		} else if (kl == 6 && memcmp(a, "report", 6) == 0) {
			if (strcmp(v, "off") == 0) {
				c->report[0] = '\0';
			} else if (!clean_abs(v) || strlen(v) >= sizeof(c->report)) {
				snprintf(msg, sizeof(msg), "argument %s: report must be off or the persyst command's clean absolute path", q);
				goto bad;
			} else {
				strcpy(c->report, v);
			}
		} else if (kl == 7 && memcmp(a, "timeout", 7) == 0) {
			int64_t ns = 0;
			int rc = parse_seconds(v, &ns);

			if (rc != 0) {
				quote(vq, sizeof(vq), v, strlen(v));
				if (rc == -1)
					snprintf(msg, sizeof(msg), "argument %s: timeout must be a number of seconds, got %s", q, vq);
				else
					snprintf(msg, sizeof(msg), "argument %s: timeout must be between 0.001 and %d seconds, got %s",
						 q, (int)(PERSYST_MAX_TIMEOUT_NS / 1000000000LL), vq);
				goto bad;
			}
			c->timeout_ns = ns;
		} else {
			snprintf(msg, sizeof(msg), "argument %s: unknown key %s (" KEYS ")", q, kq);
			goto bad;
		}
		continue;
bad:
		errs++;
		if (errf)
			errf(arg, msg);
	}
	return errs;
}
