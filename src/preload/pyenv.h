/*
 * pyenv.h - keep Python's os.environ in step with the C environment.
 */
#ifndef GPUMUTEX_PRELOAD_PYENV_H
#define GPUMUTEX_PRELOAD_PYENV_H

/*
 * If this process runs a CPython interpreter, set os.environ[key] = value
 * for each pair (a NULL value is skipped; the value GMP_PYENV_UNSET, the
 * pointer itself, deletes the key, as unsetenv does in C). The strings must stay valid for
 * the life of the process: the update may run later, on the main thread.
 * Does nothing when the process is not Python, when the interpreter is not
 * initialised or is finalising. Never takes the GIL by waiting for it:
 *  - if this thread holds the GIL, os.environ is updated now;
 *  - otherwise the update is queued with Py_AddPendingCall and runs on the
 *    main thread the next time it executes Python bytecode.
 * Preserves errno and any Python exception already set.
 */
extern const char GMP_PYENV_UNSET[];

void gmp_pyenv_update(const char *const keys[], const char *const values[],
		      int n);

#endif
