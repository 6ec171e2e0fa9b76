/*
 * hooks.c - THE list of interposed symbols. Nothing else in libgpumutex.so
 * is exported (exports.map), and nothing here runs at load time.
 *
 *   cuInit               the gate: queue for the job's lease, then the real
 *                        cuInit.
 *   cuGetProcAddress     the real one, then the answer swapped for ours when
 *   cuGetProcAddress_v2  it is the driver's cuInit or cuGetProcAddress*.
 *   dlsym, dlvsym        the real one; for cuInit/cuGetProcAddress* only,
 *                        the answer swapped for ours when it is the
 *                        driver's.
 *   cuptiSubscribe,      (cuptihooks.c) the GPU-time collector steps aside
 *   cuptiActivity-       for a profiler, then the program's own CUPTI
 *   RegisterCallbacks,   function; dlsym answers these names with ours
 *   -Enable, -EnableAnd- when the real lookup found a CUPTI function.
 *   Dump, -EnableContext,
 *   cuptiProfilerInitialize
 *   dlmopen              the real one; outside the main link-map namespace
 *                        (when configured), refused if the namespace it
 *                        loaded into holds the driver, which our hooks
 *                        could not reach there.
 *
 * Which answers are swapped is decided by the pointer the real lookup
 * returned, never by the name alone: the result must be the real
 * libcuda.so.1's cuInit, cuGetProcAddress (4 arguments) or
 * cuGetProcAddress_v2 (5 arguments), and the replacement is our function
 * of the same ABI. So versioned and per-thread variants keep the ABI their
 * caller asked for, an unrelated library that exports the same name is
 * left alone, and lookups made by libcuda itself (inside the real cuInit
 * it dlopens itself and looks names up; answering those with our hooks
 * would recurse) get the real pointers.
 *
 * Every hook preserves errno: it is saved on entry and restored before the
 * real function runs, so the caller sees what the real function did.
 */
#define _GNU_SOURCE
#include "compat.h"
#include <dlfcn.h>
#include <errno.h>
#include <string.h>

#include "gate.h"
#include "hookpriv.h"
#include "namespace.h"
#include "resolve.h"
#include "wrap.h"

#define GMP_EXPORT __attribute__((visibility("default")))
#define GMP_HIDDEN __attribute__((visibility("hidden")))

typedef int CUresult;
typedef CUresult (*cuinit_fn)(unsigned int);
typedef CUresult (*gpa1_fn)(const char *, void **, int, unsigned long long);
typedef CUresult (*gpa2_fn)(const char *, void **, int, unsigned long long,
			    int *);

/* CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND */
#define GMP_GPA_SYMBOL_NOT_FOUND 1

/* Set while this thread is inside a hook's slow path: a lookup made from
 * there (there should be none) goes straight to the real function. */
static __attribute__((tls_model("initial-exec"))) _Thread_local int hook_guard;

static CUresult hook_cuinit(unsigned int flags);
static CUresult hook_gpa1(const char *symbol, void **pfn, int version,
			  unsigned long long flags);
static CUresult hook_gpa2(const char *symbol, void **pfn, int version,
			  unsigned long long flags, int *status);

/*
 * The real driver function `p` stands for, swapped for ours: cuInit and
 * cuGetProcAddress* for the hooks below, every other driver function for
 * its wrapper (pure queries stay as they are: gmp_wrap_handout). Anything
 * that is not the driver's is returned unchanged.
 */
static void *swap(void *p, const struct gmp_cuda *c)
{
	if (!p || !c)
		return p;
	if (p == c->init)
		return (void *)&hook_cuinit;
	if (c->gpa2 && p == c->gpa2)
		return (void *)&hook_gpa2;
	if (c->gpa1 && p == c->gpa1)
		return (void *)&hook_gpa1;
	return gmp_wrap_handout(p, c);
}

/* The definition of `name` after ours in the global scope, other than
 * ours; NULL if there is none (and no dlerror() left behind). */
static void *next_of(const char *name)
{
	void *p = gmp_lookup(RTLD_NEXT, name, NULL);

	dlerror();
	return p && !gmp_in_range(gmp_self(), p) ? p : NULL;
}

/* ------------------------------------------------------------------------
 * cuInit
 *   Two entry points. hook_cuinit is the pointer the dlsym and
 *   cuGetProcAddress hooks hand out in place of the driver's cuInit; the
 *   exported cuInit is what the dynamic linker binds (programs linked with
 *   -lcuda, through the PLT).
 *   - First call in the process: gmp_gate() takes or joins the lease and
 *     sets CUDA_VISIBLE_DEVICES; then the real cuInit, whose result is
 *     returned unchanged. Later calls, from any thread: the gate answers
 *     at once (one atomic load), then the real cuInit again (the driver
 *     makes repeated calls cheap).
 *   - Not configured (no GPUMUTEX_VISIBLE_DEVICES), or
 *     CUDA_VISIBLE_DEVICES is "" or "-1": the real cuInit, nothing else.
 *   - Bad configuration: CUDA_ERROR_INVALID_VALUE; timeout or unusable
 *     lock directory: CUDA_ERROR_NO_DEVICE; the real cuInit is never
 *     called, and every later call fails the same way.
 *   - Exported cuInit whose next definition belongs to another library
 *     (not libcuda.so.1): that one, called unchanged, no gate.
 *   - Real function missing (libcuda.so.1 not loaded, no other
 *     definition): CUDA_ERROR_NO_DEVICE with a message.
 *   - Re-entrant (from inside the gate on this thread, which runs no CUDA
 *     code, so only by a bug): CUDA_ERROR_NO_DEVICE, fail closed.
 * ------------------------------------------------------------------------ */
static CUresult hook_cuinit(unsigned int flags)
{
	int saved = errno, code;
	const struct gmp_cuda *c = gmp_cuda();

	if (!c) {
		gmp_say("cuInit was called but the NVIDIA driver (libcuda.so.1) is not loaded in this process; returning CUDA_ERROR_NO_DEVICE");
		errno = saved;
		return GMP_CUDA_ERROR_NO_DEVICE;
	}
	if (gmp_gate_busy()) {
		errno = saved;
		return GMP_CUDA_ERROR_NO_DEVICE;
	}
	code = gmp_gate();
	errno = saved;
	if (code)
		return code;
	return ((cuinit_fn)c->init)(flags);
}

/*
 * The definition the dynamic linker would have bound without us (the next
 * one after libgpumutex.so), when it is some other library's and not the
 * driver's: PLT calls meant for it go to it unchanged.
 */
static void *other_than_driver(const char *name)
{
	int saved = errno;
	const struct gmp_cuda *c = gmp_cuda();
	void *p = next_of(name);

	errno = saved;
	if (!p || (c && gmp_in_range(&c->range, p)))
		return NULL;
	return p;
}

GMP_EXPORT CUresult cuInit(unsigned int flags);
CUresult cuInit(unsigned int flags)
{
	void *other = other_than_driver("cuInit");

	if (other)
		return ((cuinit_fn)other)(flags);
	return hook_cuinit(flags);
}

/* ------------------------------------------------------------------------
 * cuGetProcAddress_v2 (CUDA 12+: symbol, pfn, cudaVersion, flags, status)
 *   The real one first, with the caller's arguments unchanged (any
 *   version, any flags); then *pfn is swapped when it is the driver's
 *   cuInit (-> our cuInit) or cuGetProcAddress / _v2 (-> our wrapper of
 *   that ABI: the runtime looks cuGetProcAddress up through itself with
 *   cudaVersion 11030 and expects the 4-argument function, with 12000 and
 *   expects the 5-argument one; handing back the other crashes it).
 *   - Called by libcuda itself: nothing swapped.
 *   - Not configured: swapped all the same; our cuInit passes through.
 *   - Exported symbol whose next definition is another library's: that
 *     one, unchanged.
 *   - Real function missing (driver not loaded, or older than 12.0):
 *     *pfn = NULL, *status = not found, CUDA_ERROR_NOT_FOUND (never a
 *     call through a NULL pointer).
 *   - Re-entrant: no lock is taken here; nothing to guard.
 * ------------------------------------------------------------------------ */
/* Both ABIs share this: `v2` says which real function to call (the
 * 5-argument cuGetProcAddress_v2 with `status`, or the 4-argument one). */
static CUresult gpa_impl(int v2, const void *caller, const char *symbol,
			 void **pfn, int version, unsigned long long flags,
			 int *status)
{
	int saved = errno;
	const struct gmp_cuda *c = gmp_cuda();
	void *real = c ? (v2 ? c->gpa2 : c->gpa1) : NULL;
	CUresult rc;

	errno = saved;
	if (!real) {
		if (pfn)
			*pfn = NULL;
		if (v2 && status)
			*status = GMP_GPA_SYMBOL_NOT_FOUND;
		return GMP_CUDA_ERROR_NOT_FOUND;
	}
	rc = v2 ? ((gpa2_fn)real)(symbol, pfn, version, flags, status) :
		  ((gpa1_fn)real)(symbol, pfn, version, flags);
	if (rc == GMP_CUDA_SUCCESS && pfn && !gmp_in_range(&c->range, caller))
		*pfn = swap(*pfn, c);
	return rc;
}

static CUresult hook_gpa2(const char *symbol, void **pfn, int version,
			  unsigned long long flags, int *status)
{
	return gpa_impl(1, __builtin_return_address(0), symbol, pfn, version,
			flags, status);
}

GMP_EXPORT CUresult cuGetProcAddress_v2(const char *symbol, void **pfn,
					int version, unsigned long long flags,
					int *status);
CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int version,
			     unsigned long long flags, int *status)
{
	void *caller = __builtin_return_address(0);
	void *other = other_than_driver("cuGetProcAddress_v2");

	if (other)
		return ((gpa2_fn)other)(symbol, pfn, version, flags, status);
	return gpa_impl(1, caller, symbol, pfn, version, flags, status);
}

/* ------------------------------------------------------------------------
 * cuGetProcAddress (CUDA 11.3+: symbol, pfn, cudaVersion, flags)
 *   Same policy as cuGetProcAddress_v2, with the 4-argument ABI.
 * ------------------------------------------------------------------------ */
static CUresult hook_gpa1(const char *symbol, void **pfn, int version,
			  unsigned long long flags)
{
	return gpa_impl(0, __builtin_return_address(0), symbol, pfn, version,
			flags, NULL);
}

GMP_EXPORT CUresult cuGetProcAddress(const char *symbol, void **pfn,
				     int version, unsigned long long flags);
CUresult cuGetProcAddress(const char *symbol, void **pfn, int version,
			  unsigned long long flags)
{
	void *caller = __builtin_return_address(0);
	void *other = other_than_driver("cuGetProcAddress");

	if (other)
		return ((gpa1_fn)other)(symbol, pfn, version, flags);
	return gpa_impl(0, caller, symbol, pfn, version, flags, NULL);
}

/* ------------------------------------------------------------------------
 * dlsym (handle, name) and dlvsym (handle, name, version)
 *   Fast path, every name but "cuInit", "cuGetProcAddress" and
 *   "cuGetProcAddress_v2" (the first two bytes are compared before
 *   anything else): the real function, entered by a tail jump so that it
 *   sees the caller's return address. That matters: glibc resolves
 *   RTLD_NEXT (and the scope of RTLD_DEFAULT) relative to the object that
 *   called dlsym, found from the return address; a hook that called the
 *   real dlsym normally would resolve relative to libgpumutex.so.
 *   Slow path, those three names:
 *   - RTLD_DEFAULT or a handle: the real lookup from here; if it found
 *     our own export (RTLD_DEFAULT, dlopen(NULL)), the definition after
 *     ours instead (what the caller would get without the preload: NULL
 *     when the driver is not loaded globally).
 *   - RTLD_NEXT: the first definition in an object after the caller's,
 *     passing over ours (gmp_lookup_next).
 *   - The answer is swapped when it is the real driver's function, unless
 *     the caller is libcuda itself.
 *   - Real dlsym missing (not glibc): NULL.
 *   - Re-entrant (hook_guard): the real function, nothing swapped.
 * ------------------------------------------------------------------------ */

/* Two pointers come back in two registers (rax:rdx on x86-64). */
struct gmp_answer {
	void *value; /* the answer, when tail is NULL */
	void *tail;  /* else the real function to jump to, same arguments */
};

/*
 * The names whose answer may have to be swapped. Caller checked "cu".
 * Driver API functions are "cu" and a capital letter (cuInit, cuMemAlloc);
 * cudnn*, cublas*, curl_* and the runtime's cuda* are not, and keep the
 * fast path. Without the generated wrappers only the three names.
 */
static int handled(const char *name)
{
	if (name[2] == 'p')
		return gmp_cupti_hook(name, NULL) != NULL;
	if (gmp_wrappers())
		return name[2] >= 'A' && name[2] <= 'Z';
	if (name[2] == 'I')
		return strcmp(name + 2, "Init") == 0;
	return name[2] == 'G' && strncmp(name + 2, "GetProcAddress", 14) == 0 &&
	       (name[16] == '\0' || strcmp(name + 16, "_v2") == 0);
}

static struct gmp_answer decide(void *handle, const char *name,
				const char *version, const void *caller)
{
	struct gmp_answer a = { NULL, NULL };
	const struct gmp_cuda *c;
	const struct gmp_range *self;
	int saved;
	void *r;

	if (__builtin_expect(!name || name[0] != 'c' || name[1] != 'u', 1) ||
	    !handled(name) || hook_guard) {
		a.tail = version ? (void *)gmp_real_dlvsym() :
			(void *)gmp_real_dlsym();
		return a;
	}
	saved = errno;
	hook_guard = 1;
	c = gmp_cuda();
	self = gmp_self();
	if (handle == RTLD_NEXT) {
		r = gmp_lookup_next(caller, name, version, 1);
	} else {
		r = gmp_lookup(handle, name, version);
		if (r && gmp_in_range(self, r))
			r = gmp_lookup(RTLD_NEXT, name, version);
	}
	if (name[2] == 'p') {
		/* A CUPTI entry point a profiler starts with: ours, which
		 * steps aside and calls the program's own. */
		if (r)
			r = gmp_cupti_hook(name, r);
	} else if (c && !gmp_in_range(&c->range, caller)) {
		r = swap(r, c);
	}
	hook_guard = 0;
	errno = saved;
	a.value = r;
	return a;
}

GMP_HIDDEN __attribute__((used)) struct gmp_answer
gmp_dlsym_decide(void *handle, const char *name, void *caller);
GMP_HIDDEN __attribute__((used)) struct gmp_answer
gmp_dlvsym_decide(void *handle, const char *name, const char *version,
		  void *caller);

struct gmp_answer gmp_dlsym_decide(void *handle, const char *name,
				   void *caller)
{
	return decide(handle, name, NULL, caller);
}

struct gmp_answer gmp_dlvsym_decide(void *handle, const char *name,
				    const char *version, void *caller)
{
	return decide(handle, name, version, caller);
}

/* ------------------------------------------------------------------------
 * dlmopen (lmid, file, mode)
 *   A library loaded into a link-map namespace other than the main one
 *   gets its own copy of the driver (even when the main namespace has one
 *   loaded already), and LD_PRELOAD libraries are not loaded there: its
 *   cuInit calls go to that copy by its own PLT, and none of our hooks
 *   sees them.
 *   - lmid LM_ID_BASE, file NULL, or not configured: the real dlmopen,
 *     entered by a tail jump as for dlsym (glibc expands $ORIGIN and
 *     searches RPATH/RUNPATH relative to the caller it finds from the
 *     return address).
 *   - Otherwise (LM_ID_NEWLM, or a namespace made by an earlier dlmopen):
 *     the real dlmopen on the caller's behalf (gmp_ns_dlmopen, which
 *     resolves the name for the caller first), then the namespace it
 *     loaded into is inspected: if it holds the driver (libcuda.so*,
 *     loaded by this call or before, named or as a dependency), the
 *     handle is closed and NULL returned, with a gpumutex: line on stderr
 *     and dlerror() saying why; else the real result, unchanged.
 *   - Real dlmopen missing (not glibc): NULL.
 *   - Constructors of the loaded objects run before the check; code in
 *     an allowed namespace that dlopens the driver itself later is not
 *     seen (docs/design.md lists what remains open).
 * ------------------------------------------------------------------------ */
GMP_HIDDEN __attribute__((used)) struct gmp_answer
gmp_dlmopen_decide(long lmid, const char *file, int mode, void *caller);

struct gmp_answer gmp_dlmopen_decide(long lmid, const char *file, int mode,
				     void *caller)
{
	struct gmp_answer a = { NULL, NULL };
	int saved = errno;

	if (gmp_ns_passes(lmid, file)) {
		a.tail = (void *)gmp_real_dlmopen();
		errno = saved;
		return a; /* no real function: NULL */
	}
	a.value = gmp_ns_dlmopen(lmid, file, mode, caller);
	return a;
}

#if defined(__x86_64__)
/*
 * The entry points, in assembly because C cannot promise a tail call
 * (and the one-line standalone build compiles without optimisation).
 * Each saves its arguments, asks decide (caller = our return address),
 * restores the arguments and either returns decide's value or jumps to
 * the real function with the stack exactly as the caller left it. r11 is
 * a scratch register no argument uses. endbr64 is spelled as bytes for
 * assemblers that predate it.
 */
/* A three-argument entry point (dlvsym, dlmopen): as dlsym's below, with
 * the third argument saved too and decide's result in rdx. */
#define GMP_ENTRY3(name) \
	".globl " #name "\n" \
	".type " #name ", @function\n" \
	".p2align 4\n" \
	#name ":\n" \
	"	.cfi_startproc\n" \
	"	.byte 0xf3, 0x0f, 0x1e, 0xfa\n" \
	"	pushq %rdi\n" \
	"	.cfi_adjust_cfa_offset 8\n" \
	"	pushq %rsi\n" \
	"	.cfi_adjust_cfa_offset 8\n" \
	"	pushq %rdx\n" \
	"	.cfi_adjust_cfa_offset 8\n" \
	"	movq 24(%rsp), %rcx\n" \
	"	call gmp_" #name "_decide@PLT\n" \
	"	movq %rdx, %r11\n" \
	"	popq %rdx\n" \
	"	.cfi_adjust_cfa_offset -8\n" \
	"	popq %rsi\n" \
	"	.cfi_adjust_cfa_offset -8\n" \
	"	popq %rdi\n" \
	"	.cfi_adjust_cfa_offset -8\n" \
	"	testq %r11, %r11\n" \
	"	jnz 1f\n" \
	"	ret\n" \
	"1:	jmpq *%r11\n" \
	"	.cfi_endproc\n" \
	".size " #name ", .-" #name "\n"

__asm__(
	".text\n"
	".globl dlsym\n"
	".type dlsym, @function\n"
	".p2align 4\n"
	"dlsym:\n"
	"	.cfi_startproc\n"
	"	.byte 0xf3, 0x0f, 0x1e, 0xfa\n"
	"	pushq %rdi\n"
	"	.cfi_adjust_cfa_offset 8\n"
	"	pushq %rsi\n"
	"	.cfi_adjust_cfa_offset 8\n"
	"	subq $8, %rsp\n"
	"	.cfi_adjust_cfa_offset 8\n"
	"	movq 24(%rsp), %rdx\n"
	"	call gmp_dlsym_decide@PLT\n"
	"	addq $8, %rsp\n"
	"	.cfi_adjust_cfa_offset -8\n"
	"	popq %rsi\n"
	"	.cfi_adjust_cfa_offset -8\n"
	"	popq %rdi\n"
	"	.cfi_adjust_cfa_offset -8\n"
	"	movq %rdx, %r11\n"
	"	testq %r11, %r11\n"
	"	jnz 1f\n"
	"	ret\n"
	"1:	jmpq *%r11\n"
	"	.cfi_endproc\n"
	".size dlsym, .-dlsym\n"
	"\n"
	GMP_ENTRY3(dlvsym)
	"\n"
	GMP_ENTRY3(dlmopen));
#else
/*
 * Other architectures: plain C entry points. The real function is called
 * from here, so RTLD_NEXT is emulated (gmp_lookup_next) and RTLD_DEFAULT
 * searches the global scope only (a caller dlopened RTLD_LOCAL does not
 * see its own local scope through RTLD_DEFAULT).
 */
GMP_EXPORT void *dlsym(void *handle, const char *name)
{
	void *caller = __builtin_return_address(0);
	struct gmp_answer a = gmp_dlsym_decide(handle, name, caller);

	if (!a.tail)
		return a.value;
	if (handle == RTLD_NEXT)
		return gmp_lookup_next(caller, name, NULL, 0);
	return ((gmp_dlsym_fn)a.tail)(handle, name);
}

GMP_EXPORT void *dlvsym(void *handle, const char *name, const char *version)
{
	void *caller = __builtin_return_address(0);
	struct gmp_answer a = gmp_dlvsym_decide(handle, name, version, caller);

	if (!a.tail)
		return a.value;
	if (handle == RTLD_NEXT)
		return gmp_lookup_next(caller, name, version, 0);
	return ((gmp_dlvsym_fn)a.tail)(handle, name, version);
}

GMP_EXPORT void *dlmopen(Lmid_t lmid, const char *file, int mode)
{
	void *caller = __builtin_return_address(0);
	struct gmp_answer a = gmp_dlmopen_decide(lmid, file, mode, caller);

	if (!a.tail)
		return a.value;
	return ((gmp_dlmopen_fn)a.tail)(lmid, file, mode);
}
#endif
