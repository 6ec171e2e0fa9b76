/*
 * msgstub.c - the frontend's message function (front.c) for the copy
 * engine's test programs (pcunit, pchuge), which link the engine alone:
 * the engine may call it for an unreadable GPU_OFFLOAD_COPY_THREADS.
 */
#include <stdarg.h>
#include <stdio.h>

#include "frontend.h"

void gpo_msg_once(int kind, const char *fmt, ...)
{
	va_list ap;

	(void)kind;
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}
