/*
 * metrics_http.c - `gpumutex metrics --listen`: a minimal HTTP/1.1 server
 * for Prometheus's scrapes. One connection at a time (a scrape takes
 * milliseconds), so no threads; what keeps a slow, silent or malformed
 * client from stalling it is that each connection has GM_HTTP_SECONDS in
 * all to send its request and take the answer (non-blocking socket, poll
 * against one deadline), and a request is read into GM_HTTP_MAX bytes at
 * most. Whatever a client sends, the answer is a status line or nothing.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "lease.h"
#include "metrics.h"

#define GM_HTTP_SECONDS 5
#define GM_HTTP_MAX 8192

static volatile sig_atomic_t stop;
static void on_stop(int sig) { (void)sig; stop = 1; }

static int64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Wait for `ev` on fd until the deadline: 1 ready, 0 not (time is up,
 * or the server is stopping). */
static int ready(int fd, short ev, int64_t deadline)
{
	for (;;) {
		struct pollfd p = { fd, ev, 0 };
		int64_t left = deadline - now_ms();
		int rc;

		if (left <= 0 || stop)
			return 0;
		rc = poll(&p, 1, (int)left);
		if (rc > 0)
			return 1;
		if (rc < 0 && errno != EINTR)
			return 0;
	}
}

/* Read the request head into buf (NUL-terminated). Its length, 0 when the
 * client gave up or ran out of time, -1 when it is larger than buf. */
static int read_head(int fd, char *buf, size_t cap, int64_t deadline)
{
	size_t n = 0;

	while (!strstr(buf, "\r\n\r\n") && !strstr(buf, "\n\n")) {
		ssize_t r;
		if (n + 1 >= cap)
			return -1;
		if (!ready(fd, POLLIN, deadline))
			return 0;
		r = recv(fd, buf + n, cap - 1 - n, 0);
		if (r < 0 && (errno == EINTR || errno == EAGAIN))
			continue;
		if (r <= 0)
			return 0;
		n += (size_t)r;
		buf[n] = '\0';
		if (memchr(buf, '\0', n)) /* binary noise: not HTTP */
			return (int)n;
	}
	return (int)n;
}

static void send_all(int fd, const char *p, size_t n, int64_t deadline)
{
	while (n > 0) {
		ssize_t w;
		if (!ready(fd, POLLOUT, deadline))
			return;
		w = send(fd, p, n, MSG_NOSIGNAL);
		if (w < 0 && (errno == EINTR || errno == EAGAIN))
			continue;
		if (w <= 0)
			return;
		p += w;
		n -= (size_t)w;
	}
}

static void answer(int fd, const char *status, const char *type,
		   const char *body, size_t len, int with_body, int64_t deadline)
{
	char hdr[256];
	int h = snprintf(hdr, sizeof hdr,
			 "HTTP/1.1 %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
			 "Connection: close\r\n\r\n", status, type, len);

	send_all(fd, hdr, (size_t)h, deadline);
	if (with_body)
		send_all(fd, body, len, deadline);
}

#define PLAIN "text/plain; charset=utf-8"

/*
 * The request line "METHOD TARGET HTTP/1.x": METHOD upper-case letters
 * (fewer than ml), TARGET no blank or line end (fewer than tl). 0, or -1
 * for anything else. By hand, not sscanf: glibc 2.38 and later redirect
 * sscanf to a C23 variant a program built there could not load without
 * (src/lease/num.c).
 */
static int request_line(const char *req, char *method, size_t ml, char *target,
			size_t tl)
{
	size_t m = 0, t = 0;

	while (req[m] >= 'A' && req[m] <= 'Z')
		m++;
	if (m == 0 || m >= ml || req[m] != ' ')
		return -1;
	memcpy(method, req, m);
	method[m] = '\0';
	req += m + 1;
	while (req[t] && req[t] != ' ' && req[t] != '\r' && req[t] != '\n')
		t++;
	if (t == 0 || t >= tl)
		return -1;
	memcpy(target, req, t);
	target[t] = '\0';
	req += t;
	if (strncmp(req, " HTTP/1.", 8) != 0 || (req[8] != '0' && req[8] != '1'))
		return -1;
	return 0;
}

/* One connection: read its request, answer it, close it. */
static void serve_one(const char *dir, int fd)
{
	static char req[GM_HTTP_MAX];
	int64_t deadline = now_ms() + GM_HTTP_SECONDS * 1000;
	char method[16], target[256], why[GM_ERR_MAX], *text = NULL;
	size_t len = 0;
	int n, head;

	req[0] = '\0';
	fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
	n = read_head(fd, req, sizeof req, deadline);
	if (n < 0) {
		const char *m = "request too large\n";
		answer(fd, "431 Request Header Fields Too Large", PLAIN, m, strlen(m), 1, deadline);
		goto out;
	}
	if (n == 0)
		goto out;
	if (request_line(req, method, sizeof method, target, sizeof target)) {
		answer(fd, "400 Bad Request", PLAIN, "bad request\n", 12, 1, deadline);
		goto out;
	}
	head = !strcmp(method, "HEAD");
	if (strcmp(method, "GET") && !head) {
		answer(fd, "405 Method Not Allowed", PLAIN, "GET only\n", 9, 1, deadline);
		goto out;
	}
	if (!strcmp(target, "/")) {
		const char *m = "gpumutex metrics: see /metrics\n";
		answer(fd, "200 OK", PLAIN, m, strlen(m), !head, deadline);
		goto out;
	}
	if (strcmp(target, "/metrics") && strncmp(target, "/metrics?", 9)) {
		answer(fd, "404 Not Found", PLAIN, "not found\n", 10, !head, deadline);
		goto out;
	}
	if (gm_metrics_text(dir, &text, &len, why, sizeof why) == -2) {
		answer(fd, "500 Internal Server Error", PLAIN, "out of memory\n", 14, 1, deadline);
		goto out;
	}
	/* An unreadable lock directory is still a 200: the body says
	 * gpumutex_up 0, which is what an alert wants to see. */
	answer(fd, "200 OK", "text/plain; version=0.0.4; charset=utf-8", text, len,
	       !head, deadline);
out:
	free(text);
	shutdown(fd, SHUT_WR);
	close(fd);
}

/* "[HOST:]PORT" or "[V6]:PORT" into host and port; 0 or -1. */
static int split(const char *where, char *host, size_t hl, char *port, size_t pl)
{
	const char *colon;
	uint64_t n;

	if (where[0] == '[') {
		const char *end = strchr(where, ']');
		if (!end || end[1] != ':')
			return -1;
		snprintf(host, hl, "%.*s", (int)(end - where - 1), where + 1);
		snprintf(port, pl, "%s", end + 2);
	} else if ((colon = strrchr(where, ':')) != NULL) {
		snprintf(host, hl, "%.*s", (int)(colon - where), where);
		snprintf(port, pl, "%s", colon + 1);
	} else {
		host[0] = '\0';
		snprintf(port, pl, "%s", where);
	}
	if (!host[0])
		snprintf(host, hl, "127.0.0.1");
	if (!port[0] || strspn(port, "0123456789") != strlen(port) ||
	    gm_parse_uint(port, 10, 65535, &n))
		return -1;
	return 0;
}

static int listen_on(const char *where, char *shown, size_t sl)
{
	char host[256], port[8], hbuf[NI_MAXHOST], pbuf[NI_MAXSERV];
	struct addrinfo hints = { .ai_flags = AI_PASSIVE | AI_NUMERICSERV,
				  .ai_socktype = SOCK_STREAM }, *res, *a;
	struct sockaddr_storage ss;
	socklen_t sslen = sizeof ss;
	int fd = -1, one = 1, rc;

	if (split(where, host, sizeof host, port, sizeof port)) {
		fprintf(stderr, "gpumutex metrics: --listen %s: expected [HOST:]PORT, such as 9402 or 0.0.0.0:9402 or [::1]:9402\n",
			where);
		return -2;
	}
	rc = getaddrinfo(host, port, &hints, &res);
	if (rc) {
		fprintf(stderr, "gpumutex metrics: --listen %s: %s\n", where, gai_strerror(rc));
		return -1;
	}
	for (a = res; a && fd < 0; a = a->ai_next) {
		fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
		if (fd < 0)
			continue;
		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
		if (bind(fd, a->ai_addr, a->ai_addrlen) || listen(fd, 16)) {
			rc = errno;
			close(fd);
			fd = -1;
			errno = rc;
		}
	}
	freeaddrinfo(res);
	if (fd < 0) {
		fprintf(stderr, "gpumutex metrics: cannot listen on %s: %s\n", where, strerror(errno));
		return -1;
	}
	getsockname(fd, (struct sockaddr *)&ss, &sslen);
	if (getnameinfo((struct sockaddr *)&ss, sslen, hbuf, sizeof hbuf, pbuf,
			sizeof pbuf, NI_NUMERICHOST | NI_NUMERICSERV) == 0)
		snprintf(shown, sl, ss.ss_family == AF_INET6 ? "[%s]:%s" : "%s:%s", hbuf, pbuf);
	else
		snprintf(shown, sl, "%s", where);
	return fd;
}

int gm_metrics_serve(const char *dir, const char *where)
{
	struct sigaction sa;
	char shown[NI_MAXHOST + 16];
	int lfd = listen_on(where, shown, sizeof shown);

	if (lfd < 0)
		return lfd == -2 ? 2 : 1;
	/* No SA_RESTART: accept() returns on SIGINT/SIGTERM, and we stop. */
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_stop;
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
	fprintf(stderr, "gpumutex metrics: serving http://%s/metrics for %s\n", shown, dir);
	while (!stop) {
		int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
		if (fd < 0) {
			if (errno == EINTR || errno == ECONNABORTED || errno == EAGAIN)
				continue;
			if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS ||
			    errno == ENOMEM)
				continue; /* passing; the next client may fare better */
			fprintf(stderr, "gpumutex metrics: accept: %s\n", strerror(errno));
			close(lfd);
			return 1;
		}
		serve_one(dir, fd);
	}
	close(lfd);
	return 0;
}
