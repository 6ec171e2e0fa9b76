/*
 * hookpriv.h - between hooks.c (the dlsym hook) and cuptihooks.c.
 */
#ifndef GPUMUTEX_PRELOAD_HOOKPRIV_H
#define GPUMUTEX_PRELOAD_HOOKPRIV_H

/* Our hook for the CUPTI function `name`, or NULL when it is not one of
 * those cuptihooks.c interposes. `answer`, when not NULL: the real
 * function a dlsym of that name found, which the hook then calls. */
void *gmp_cupti_hook(const char *name, void *answer);

#endif
