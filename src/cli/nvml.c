/*
 * nvml.c - NVML through dlopen, in a child process (nvml.h says why).
 * The lessons of the driver's own versions apply: the library comes with
 * the driver, its entry points have versioned names (_v2, _v3) that older
 * drivers lack, and a layout we do not know is declined rather than read.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "evlog.h"
#include "internal.h" /* gm__proc_stat_field, shared with the lease core */
#include "lease.h"
#include "nvml.h"

typedef int (*fn_void)(void);
typedef int (*fn_uintp)(unsigned *);
typedef const char *(*fn_err)(int);
typedef int (*fn_handle)(unsigned, void **);
typedef int (*fn_util)(void *, unsigned *);
typedef int (*fn_mem)(void *, unsigned long long *);
typedef int (*fn_name)(void *, char *, unsigned);
typedef int (*fn_procs)(void *, unsigned *, void *);

static void *sym(void *h, const char *a, const char *b)
{
	void *p = dlsym(h, a);
	return p || !b ? p : dlsym(h, b);
}

static const char *errstr(fn_err e, int rc)
{
	const char *s = e ? e(rc) : NULL;
	return s ? s : "error";
}

static void read_in_child(struct gm_nvml *n)
{
	void *h = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
	fn_void init, shut;
	fn_uintp count;
	fn_err err;
	fn_handle handle;
	fn_util util;
	fn_mem mem;
	fn_name name;
	fn_procs procs;
	int v1 = 0, rc;
	unsigned cnt = 0;
	/* Room for 64 entries of any layout up to 64 bytes (v1: 16, v2/v3:
	 * 24), so that a newer, larger one cannot write past the end. */
	static unsigned char buf[GM_NVML_PROCS * 64];

	if (!h) {
		const char *e = dlerror();
		snprintf(n->note, sizeof n->note, "NVML not available (%s)",
			 e ? e : "libnvidia-ml.so.1 not found");
		return;
	}
	init = (fn_void)sym(h, "nvmlInit_v2", "nvmlInit");
	shut = (fn_void)sym(h, "nvmlShutdown", NULL);
	err = (fn_err)sym(h, "nvmlErrorString", NULL);
	count = (fn_uintp)sym(h, "nvmlDeviceGetCount_v2", "nvmlDeviceGetCount");
	handle = (fn_handle)sym(h, "nvmlDeviceGetHandleByIndex_v2", "nvmlDeviceGetHandleByIndex");
	util = (fn_util)sym(h, "nvmlDeviceGetUtilizationRates", NULL);
	mem = (fn_mem)sym(h, "nvmlDeviceGetMemoryInfo", NULL);
	name = (fn_name)sym(h, "nvmlDeviceGetName", NULL);
	procs = (fn_procs)sym(h, "nvmlDeviceGetComputeRunningProcesses_v3",
			      "nvmlDeviceGetComputeRunningProcesses_v2");
	if (!procs) {
		procs = (fn_procs)sym(h, "nvmlDeviceGetComputeRunningProcesses", NULL);
		v1 = 1;
	}
	if (!init || !count || !handle) {
		snprintf(n->note, sizeof n->note, "NVML not usable (libnvidia-ml.so.1 lacks nvmlInit or the device functions)");
		return;
	}
	if ((rc = init()) != 0) {
		snprintf(n->note, sizeof n->note, "NVML failed to start (nvmlInit: %s, code %d)",
			 errstr(err, rc), rc);
		return;
	}
	if ((rc = count(&cnt)) != 0) {
		snprintf(n->note, sizeof n->note, "NVML cannot count the GPUs (%s, code %d)",
			 errstr(err, rc), rc);
		if (shut)
			shut();
		return;
	}
	n->available = 1;
	for (unsigned i = 0; i < cnt && i < 64; i++) {
		struct gm_nvml_dev *d = &n->dev[n->ndev++];
		void *dev = NULL;
		unsigned u[2];
		unsigned long long m[3];
		size_t len = 0;

		d->index = (int)i;
		if ((rc = handle(i, &dev)) != 0) {
			snprintf(d->note, sizeof d->note, "no handle (%s)", errstr(err, rc));
			continue;
		}
		if (name && name(dev, d->name, sizeof d->name) != 0)
			d->name[0] = '\0';
		d->name[sizeof d->name - 1] = '\0';
		if (util && (rc = util(dev, u)) == 0)
			d->have_util = 1, d->util = u[0], d->memutil = u[1];
		else
			len += (size_t)snprintf(d->note + len, sizeof d->note - len, "utilisation: %s; ",
						util ? errstr(err, rc) : "not provided");
		if (len >= sizeof d->note)
			len = sizeof d->note - 1;
		/* nvmlMemory_t: total, free, used. */
		if (mem && (rc = mem(dev, m)) == 0)
			d->have_mem = 1, d->total = m[0], d->used = m[2];
		else
			len += (size_t)snprintf(d->note + len, sizeof d->note - len, "memory: %s; ",
						mem ? errstr(err, rc) : "not provided");
		if (len >= sizeof d->note)
			len = sizeof d->note - 1;
		if (procs) {
			unsigned k = GM_NVML_PROCS;
			memset(buf, 0, sizeof buf);
			rc = procs(dev, &k, buf);
			if (rc == 0 && k <= GM_NVML_PROCS) {
				size_t stride = v1 ? 16 : 24;
				d->have_procs = 1;
				for (unsigned j = 0; j < k; j++) {
					unsigned pid;
					unsigned long long used;
					memcpy(&pid, buf + j * stride, sizeof pid);
					memcpy(&used, buf + j * stride + 8, sizeof used);
					if (pid == 0 || pid > 4194304) {
						/* Not the layout we know: decline. */
						d->have_procs = 0;
						d->nprocs = 0;
						snprintf(d->note + len, sizeof d->note - len,
							 "processes: a list we cannot read; ");
						break;
					}
					d->procs[d->nprocs].pid = (int)pid;
					d->procs[d->nprocs].used_known = used != ~0ULL;
					d->procs[d->nprocs++].used = used != ~0ULL ? used : 0;
				}
			} else {
				snprintf(d->note + len, sizeof d->note - len, "processes: %s; ",
					 rc == 0 ? "too many" : errstr(err, rc));
			}
		}
		len = strlen(d->note);
		if (len >= 2 && d->note[len - 2] == ';')
			d->note[len - 2] = '\0';
	}
	if (shut)
		shut();
}

void gm_nvml_read(struct gm_nvml *n)
{
	int p[2];
	pid_t pid;
	size_t got = 0;
	int64_t deadline;
	struct timespec ts;

	memset(n, 0, sizeof *n);
	if (pipe2(p, O_CLOEXEC) != 0) {
		snprintf(n->note, sizeof n->note, "NVML not read (pipe: %s)", strerror(errno));
		return;
	}
	fflush(NULL);
	pid = fork();
	if (pid < 0) {
		close(p[0]);
		close(p[1]);
		snprintf(n->note, sizeof n->note, "NVML not read (fork: %s)", strerror(errno));
		return;
	}
	if (pid == 0) {
		struct gm_nvml *c = calloc(1, sizeof *c);
		const char *b;
		size_t off = 0;
		close(p[0]);
		if (c) {
			read_in_child(c);
			b = (const char *)c;
			while (off < sizeof *c) {
				ssize_t w = write(p[1], b + off, sizeof *c - off);
				if (w <= 0)
					break;
				off += (size_t)w;
			}
		}
		_exit(0);
	}
	close(p[1]);
	clock_gettime(CLOCK_MONOTONIC, &ts);
	deadline = (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000 + 5000;
	while (got < sizeof *n) {
		struct pollfd pf = { p[0], POLLIN, 0 };
		int64_t now;
		ssize_t r;
		clock_gettime(CLOCK_MONOTONIC, &ts);
		now = (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
		if (now >= deadline || poll(&pf, 1, (int)(deadline - now)) <= 0)
			break;
		r = read(p[0], (char *)n + got, sizeof *n - got);
		if (r <= 0)
			break;
		got += (size_t)r;
	}
	close(p[0]);
	if (got < sizeof *n) {
		int st = 0;
		kill(pid, SIGKILL);
		waitpid(pid, &st, 0);
		memset(n, 0, sizeof *n);
		if (WIFSIGNALED(st) && WTERMSIG(st) != SIGKILL)
			snprintf(n->note, sizeof n->note, "NVML crashed while read (signal %d); utilisation and memory not shown",
				 WTERMSIG(st));
		else
			snprintf(n->note, sizeof n->note, "NVML did not answer within 5 s; utilisation and memory not shown");
		return;
	}
	waitpid(pid, NULL, 0);
	n->note[sizeof n->note - 1] = '\0';
}

/* ---- gpumutex status -------------------------------------------------- */

static int parent_of(int pid)
{
	uint64_t pp;

	/* Field 4 is the parent's PID. */
	return gm__proc_stat_field(pid, 4, &pp) == 0 && pp <= 4194304 ?
	       (int)pp : 0;
}

/* Does process `pid` belong to lease l: a member, or a descendant of one? */
static int of_lease(int pid, const struct gm_state_lease *l)
{
	for (int depth = 0; pid > 1 && depth < 32; depth++) {
		for (int i = 0; i < l->npids; i++)
			if (l->pids[i] == pid)
				return 1;
		pid = parent_of(pid);
	}
	return 0;
}

static const struct gm_nvml_dev *dev_of(const struct gm_nvml *n, int index)
{
	for (int i = 0; i < n->ndev; i++)
		if (n->dev[i].index == index)
			return &n->dev[i];
	return NULL;
}

/* The memory lease l's processes use on device d; -1 when not known. */
static int64_t lease_mem(const struct gm_nvml_dev *d, const struct gm_state_lease *l,
			 int *nproc)
{
	int64_t sum = 0;

	*nproc = 0;
	if (!d || !d->have_procs)
		return -1;
	for (int i = 0; i < d->nprocs; i++)
		if (of_lease(d->procs[i].pid, l)) {
			(*nproc)++;
			sum += (int64_t)d->procs[i].used;
		}
	return sum;
}

int gm_nvml_lease_context(const struct gm_nvml *n, const struct gm_state_lease *l)
{
	int unknown = 0;

	if (!n->available || l->ndevices == 0)
		return -1;
	/* A context anywhere is a context: one on a GPU it does not hold
	 * (outside gpumutex's management) still means the process uses a
	 * GPU, and the mark is about processes that use none. */
	for (int i = 0; i < n->ndev; i++)
		for (int k = 0; n->dev[i].have_procs && k < n->dev[i].nprocs; k++)
			if (of_lease(n->dev[i].procs[k].pid, l))
				return 1;
	for (int i = 0; i < l->ndevices; i++) {
		const struct gm_nvml_dev *d = dev_of(n, l->devices[i]);
		if (!d || !d->have_procs) {
			unknown = 1;
			continue;
		}
		/* A process on a GPU the lease holds, not found to be the
		 * lease's (above), may be one all the same: a child whose
		 * member ancestors exited (reparented to init or a
		 * subreaper), a member in another PID namespace or hidden by
		 * hidepid; else it escaped the queue. Either way "no
		 * context" could be wrong: no verdict. */
		if (d->nprocs > 0)
			unknown = 1;
	}
	/* With no member visible here, nothing could be attributed to it. */
	if (unknown || l->npids == 0 || l->nhidden)
		return -1;
	return 0;
}

#define GIB 1073741824.0

void gm_status_nvml_text(FILE *f, const struct gm_state *st, const struct gm_nvml *n)
{
	if (!n->available) {
		fprintf(f, "\nUtilisation: %s.\n", n->note);
		return;
	}
	fprintf(f, "\nUtilisation (NVML):\n%-4s %-6s %-22s %s\n", "GPU", "BUSY", "MEMORY", "LEASE'S PROCESSES");
	for (int i = 0; i < st->ndevices; i++) {
		const struct gm_state_device *sd = &st->devices[i];
		const struct gm_nvml_dev *d = dev_of(n, sd->index);
		char busy[16] = "?", memo[48] = "?", lm[64] = "-";
		if (!d) {
			fprintf(f, "%-4d (NVML does not see this GPU)\n", sd->index);
			continue;
		}
		if (d->have_util)
			snprintf(busy, sizeof busy, "%u%%", d->util);
		if (d->have_mem)
			snprintf(memo, sizeof memo, "%.1f of %.1f GiB", d->used / GIB, d->total / GIB);
		if (sd->lease >= 0) {
			int np;
			int64_t m = lease_mem(d, &st->leases[sd->lease], &np);
			if (m >= 0)
				snprintf(lm, sizeof lm, "%.2f GiB in %d process%s", m / GIB, np,
					 np == 1 ? "" : "es");
			else
				snprintf(lm, sizeof lm, "?");
		}
		fprintf(f, "%-4d %-6s %-22s %s", sd->index, busy, memo, lm);
		if (d->note[0])
			fprintf(f, "   (could not read %s)", d->note);
		fprintf(f, "\n");
	}
}

void gm_status_nvml_json(FILE *f, const struct gm_state *st, const struct gm_nvml *n)
{
	fprintf(f, ", \"nvml\": {\"available\": %s, \"note\": ", n->available ? "true" : "false");
	if (n->note[0])
		gm_json_str(f, n->note);
	else
		fprintf(f, "null");
	fprintf(f, ", \"devices\": [");
	for (int i = 0, k = 0; n->available && i < st->ndevices; i++) {
		const struct gm_state_device *sd = &st->devices[i];
		const struct gm_nvml_dev *d = dev_of(n, sd->index);
		if (!d)
			continue;
		fprintf(f, "%s{\"index\": %d, \"name\": ", k++ ? ", " : "", d->index);
		gm_json_str(f, d->name);
		if (d->have_util)
			fprintf(f, ", \"util\": %u, \"memutil\": %u", d->util, d->memutil);
		else
			fprintf(f, ", \"util\": null, \"memutil\": null");
		if (d->have_mem)
			fprintf(f, ", \"memory_used\": %" PRIu64 ", \"memory_total\": %" PRIu64, d->used, d->total);
		else
			fprintf(f, ", \"memory_used\": null, \"memory_total\": null");
		fprintf(f, ", \"lease\": ");
		if (sd->lease >= 0) {
			int np;
			int64_t m = lease_mem(d, &st->leases[sd->lease], &np);
			fprintf(f, "\"%" PRIu64 "\", \"lease_memory\": ", st->leases[sd->lease].lease_id);
			if (m >= 0)
				fprintf(f, "%" PRId64 ", \"lease_processes\": %d", m, np);
			else
				fprintf(f, "null, \"lease_processes\": null");
		} else {
			fprintf(f, "null, \"lease_memory\": null, \"lease_processes\": null");
		}
		fprintf(f, ", \"note\": ");
		if (d->note[0])
			gm_json_str(f, d->note);
		else
			fprintf(f, "null");
		fprintf(f, "}");
	}
	fprintf(f, "]}");
}
