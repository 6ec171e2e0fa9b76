/*
 * fakelog.h - the fake driver's call counts and journal (fakelog.c), for
 * fakedev.c: fakedev_count is exported (the stand-in cuBLAS/cuSOLVER count
 * theirs too), fd_journal appends one line to FAKEDEV_JOURNAL's file.
 */
#ifndef FAKELOG_H
#define FAKELOG_H

#define API __attribute__((visibility("default")))

API void fakedev_count(const char *name);
void fd_journal(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
