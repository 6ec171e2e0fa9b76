/*
 * say.c - the library's one way of writing a message (gate.h, gmp_say):
 * "gpumutex: ..." on stderr, one write, errno and SIGPIPE left as found.
 * Apart from gate.c, which it served first, because every file of the
 * library says things.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "gate.h"

/* Longest message line, and the one used when there is no memory for it. */
#define SAY_MAX 2048
#define SAY_SMALL 256

void gmp_say(const char *fmt, ...)
{
	/* The line is on the heap: cuInit may run on a thread with a 16 KiB
	 * stack (Go, some JVMs and thread pools make such threads), and
	 * gmp_say is called from several threads without a lock. Without
	 * memory, a shorter line on the stack. */
	char small[SAY_SMALL];
	char *heap = malloc(SAY_MAX), *line = heap ? heap : small;
	size_t cap = heap ? SAY_MAX : SAY_SMALL;
	int saved = errno, n;
	size_t len;
	va_list ap;

	memcpy(line, "gpumutex: ", 10);
	va_start(ap, fmt);
	n = vsnprintf(line + 10, cap - 11, fmt, ap);
	va_end(ap);
	if (n < 0)
		n = 0;
	len = 10 + ((size_t)n < cap - 12 ? (size_t)n : cap - 12);
	line[len++] = '\n';
	/* One write: lines from processes that share the terminal do not
	 * interleave mid-line. SIGPIPE is blocked around it: a process whose
	 * stderr is a pipe nobody reads any more (`prog 2>&1 | head -1`) must
	 * not be killed by our message. A SIGPIPE our write raises is taken
	 * back before the mask is restored, one that was already pending is
	 * left for the host. */
	{
		sigset_t pipe_set, old, pending;
		int was_pending, r;

		sigemptyset(&pipe_set);
		sigaddset(&pipe_set, SIGPIPE);
		/* sigprocmask, not pthread_sigmask (GLIBC_2.32, or
		 * libpthread before): on Linux it masks the calling thread. */
		sigprocmask(SIG_BLOCK, &pipe_set, &old);
		was_pending = sigpending(&pending) == 0 &&
			      sigismember(&pending, SIGPIPE) == 1;
		do
			r = (int)write(2, line, len);
		while (r < 0 && errno == EINTR);
		if (r < 0 && errno == EPIPE && !was_pending) {
			struct timespec zero = { 0, 0 };
			sigtimedwait(&pipe_set, NULL, &zero);
		}
		sigprocmask(SIG_SETMASK, &old, NULL);
	}
	free(heap);
	errno = saved;
}
