/*
 * pyenv.c - update Python's os.environ from C, without linking libpython.
 *
 * os.environ is a snapshot taken when the interpreter starts; setenv(3)
 * does not reach it, and Python code that builds a child's environment
 * from it (env=dict(os.environ, ...)) would drop GPUMUTEX_JOB and start a
 * child that queues behind its own parent. So after the gate, a CPython
 * process gets the same values in os.environ.
 *
 * The interpreter's functions are looked up with the real dlsym and
 * RTLD_DEFAULT (never the hook). They are all in the stable ABI; no header
 * is needed. If Py_IsInitialized is not found, this is not a Python
 * process (or its interpreter was loaded RTLD_LOCAL by an embedder, which
 * we cannot reach) and nothing happens.
 *
 * Traps avoided:
 *  - Interpreter not initialised yet, or finalising: PyGILState_Ensure
 *    would hang or kill the thread. We check both and do nothing.
 *  - This thread does not hold the GIL while the GIL holder waits for this
 *    thread (a C extension that joins a worker thread which calls cuInit):
 *    taking the GIL would deadlock. We never wait for the GIL; the update
 *    is queued with Py_AddPendingCall instead and runs on the main thread
 *    at its next eval-breaker check, i.e. before it runs any more Python
 *    function. Until then only the C environment has the new values.
 *  - PyRun_SimpleString would run in __main__ and could rebind names
 *    there; we call os.environ's __setitem__ through PyObject_SetItem.
 *  - An exception already set by the caller is kept (PyErr_Fetch/Restore).
 */
#define _GNU_SOURCE
#include "compat.h"
#include <dlfcn.h>
#include <errno.h>
#include <stddef.h>

#include "pyenv.h"
#include "resolve.h"

typedef void PyObject;

struct py_api {
	int (*IsInitialized)(void);
	int (*IsFinalizing)(void);          /* Py_IsFinalizing or _Py_IsFinalizing */
	int (*GILState_Check)(void);
	void *(*ThreadState_Unchecked)(void); /* optional */
	PyObject *(*ImportModule)(const char *);
	PyObject *(*GetAttrString)(PyObject *, const char *);
	PyObject *(*Unicode_FromString)(const char *);
	int (*SetItem)(PyObject *, PyObject *, PyObject *);
	int (*DelItem)(PyObject *, PyObject *);                    /* optional */
	void (*DecRef)(PyObject *);
	void (*Err_Clear)(void);
	void (*Err_Fetch)(PyObject **, PyObject **, PyObject **);   /* optional */
	void (*Err_Restore)(PyObject *, PyObject *, PyObject *);    /* optional */
	int (*AddPendingCall)(int (*)(void *), void *);
};

static struct py_api py;
static int py_ready; /* 1: py is filled (written once, under the gate) */

/* Copies of the caller's arrays: a pending call runs after it returned. */
#define PY_MAX_VARS 8
static const char *py_keys[PY_MAX_VARS];
static const char *py_values[PY_MAX_VARS];
static int py_n;

/* Compared by address, never by text: no value a caller passes is it. */
const char GMP_PYENV_UNSET[] = "";

static void *sym(const char *name)
{
	return gmp_lookup(RTLD_DEFAULT, name, NULL);
}

/* Fill `py`. Returns 0 when this is a Python process with every function
 * we need. */
static int py_resolve(void)
{
	if (py_ready)
		return 0;
	*(void **)&py.IsInitialized = sym("Py_IsInitialized");
	if (!py.IsInitialized) {
		dlerror();
		return -1;
	}
	*(void **)&py.IsFinalizing = sym("Py_IsFinalizing");      /* 3.13+ */
	if (!py.IsFinalizing)
		*(void **)&py.IsFinalizing = sym("_Py_IsFinalizing");
	*(void **)&py.GILState_Check = sym("PyGILState_Check");
	*(void **)&py.ThreadState_Unchecked = sym("PyThreadState_GetUnchecked");
	if (!py.ThreadState_Unchecked)
		*(void **)&py.ThreadState_Unchecked = sym("_PyThreadState_UncheckedGet");
	*(void **)&py.ImportModule = sym("PyImport_ImportModule");
	*(void **)&py.GetAttrString = sym("PyObject_GetAttrString");
	*(void **)&py.Unicode_FromString = sym("PyUnicode_FromString");
	*(void **)&py.SetItem = sym("PyObject_SetItem");
	*(void **)&py.DelItem = sym("PyObject_DelItem");
	*(void **)&py.DecRef = sym("Py_DecRef");
	*(void **)&py.Err_Clear = sym("PyErr_Clear");
	*(void **)&py.Err_Fetch = sym("PyErr_Fetch");
	*(void **)&py.Err_Restore = sym("PyErr_Restore");
	*(void **)&py.AddPendingCall = sym("Py_AddPendingCall");
	dlerror(); /* the optional names may have failed */
	if (!py.IsFinalizing || !py.GILState_Check || !py.ImportModule ||
	    !py.GetAttrString || !py.Unicode_FromString || !py.SetItem ||
	    !py.DecRef || !py.Err_Clear || !py.AddPendingCall)
		return -1;
	py_ready = 1;
	return 0;
}

/* With the GIL held: os.environ[k] = v for every pair (del os.environ[k]
 * for GMP_PYENV_UNSET; a key already absent is no error). Always returns 0,
 * so a pending call never raises in the main thread. */
static int py_apply(void *arg)
{
	PyObject *os, *environ, *et = NULL, *ev = NULL, *tb = NULL;

	(void)arg;
	if (!py.IsInitialized() || py.IsFinalizing())
		return 0;
	if (py.Err_Fetch && py.Err_Restore)
		py.Err_Fetch(&et, &ev, &tb);
	os = py.ImportModule("os");
	environ = os ? py.GetAttrString(os, "environ") : NULL;
	for (int i = 0; environ && i < py_n; i++) {
		PyObject *k, *v;

		if (!py_values[i])
			continue;
		if (py_values[i] == GMP_PYENV_UNSET) {
			/* _Environ.__delitem__ also calls unsetenv: the C
			 * environment has no such key already. */
			k = py.DelItem ? py.Unicode_FromString(py_keys[i])
				       : NULL;
			if (k && py.DelItem(environ, k) < 0)
				py.Err_Clear(); /* KeyError: absent */
			if (!k && py.DelItem)
				py.Err_Clear();
			py.DecRef(k);
			continue;
		}
		k = py.Unicode_FromString(py_keys[i]);
		v = py.Unicode_FromString(py_values[i]);
		/* _Environ.__setitem__ also calls putenv: harmless, the C
		 * environment already has the same value. */
		if (!k || !v || py.SetItem(environ, k, v) < 0)
			py.Err_Clear();
		py.DecRef(k);
		py.DecRef(v);
	}
	if (!environ)
		py.Err_Clear();
	py.DecRef(environ);
	py.DecRef(os);
	if (py.Err_Fetch && py.Err_Restore)
		py.Err_Restore(et, ev, tb);
	return 0;
}

/* Does this very thread hold the GIL? PyGILState_Check answers 1 without
 * looking when its checks are disabled (sub-interpreters exist), so a
 * thread with no current thread state is also told no. */
static int holds_gil(void)
{
	if (!py.GILState_Check())
		return 0;
	if (py.ThreadState_Unchecked && !py.ThreadState_Unchecked())
		return 0;
	return 1;
}

void gmp_pyenv_update(const char *const keys[], const char *const values[],
		      int n)
{
	int saved = errno;

	if (py_resolve() != 0)
		goto out;
	if (!py.IsInitialized() || py.IsFinalizing())
		goto out;
	if (n > PY_MAX_VARS)
		n = PY_MAX_VARS;
	for (int i = 0; i < n; i++) {
		py_keys[i] = keys[i];
		py_values[i] = values[i];
	}
	py_n = n;
	if (holds_gil())
		py_apply(NULL);
	else if (py.AddPendingCall(py_apply, NULL) != 0) {
		/* The queue of pending calls is full (it holds dozens):
		 * only the C environment has the values then. */
	}
out:
	errno = saved;
}
