/*
 * wrap.c - the slow paths of the driver wrappers, what lookups hand out,
 * and giving the lease back when the process holds no context.
 *
 * The wrappers themselves are generated (tools/gen-wrappers.sh) from the
 * toolkit's list of driver functions (driver-names.txt) and the policy
 * table (driver-policy.txt). Three kinds, all in assembly on x86-64:
 *   work     "gmp_go? then jmp *real" - the fast path is two loads, a
 *            compare and an indirect jump; else gmp_wrap_slow_c, which
 *            takes the lease, and then the same jump with the caller's
 *            registers and stack untouched;
 *   context  (creating or destroying a context) a real call between
 *            gmp_wrap_enter and gmp_wrap_leave, which count contexts and
 *            keep the give-back check from running while one is created;
 *   spare    work wrappers for driver functions the table does not name
 *            (a newer driver, a private version of a function), assigned
 *            by pointer as they are handed out.
 * Every lookup that returns a driver function (dlsym, dlvsym,
 * cuGetProcAddress*) hands out the wrapper of the pointer the real lookup
 * returned (gmp_wrap_handout), and every name is also exported, so the
 * dynamic linker binds programs linked with -lcuda to the wrappers.
 *
 * Nothing here copies or changes the driver's export tables, and nothing
 * runs at load time.
 */
#define _GNU_SOURCE
#include "compat.h"
#include <dlfcn.h>
#include <errno.h>
#include <link.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "gate.h"
#include "wrap.h"
#include "activity.h"

int gmp_go;
unsigned char gmp_doubt;

typedef int CUresult;

/* Non-primary contexts created minus destroyed, through our wrappers. */
static long ctx_count;
/* Context calls between gmp_wrap_enter and gmp_wrap_leave. */
static int ctx_inflight;
/* This thread's call was already made again once after an
 * out-of-memory error with no exiting holder left (gmp_wrap_leave). */
static __attribute__((tls_model("initial-exec"))) _Thread_local int oom_again;
/* Spare wrappers handed out so far (may exceed GMP_SPARES: then none). */
static unsigned spare_used;

#define LOAD(p) __atomic_load_n(&(p), __ATOMIC_ACQUIRE)
#define STORE(p, v) __atomic_store_n(&(p), (v), __ATOMIC_RELEASE)


/* What a call that cannot be allowed returns instead of the real
 * function: the gate's (sticky) error. Jumped to with the caller's
 * arguments, which it ignores (every driver function returns CUresult). */
static CUresult fail_gate(void)
{
	return gmp_gate_code();
}

/* An exported wrapper whose name has no definition after ours. */
static CUresult fail_missing(void)
{
	return GMP_CUDA_ERROR_NO_DEVICE;
}

const char *gmp_wrap_name_of(unsigned i)
{
	return gmp_wrappers() && i < gmp_wrap_n ? gmp_wrap_name(i) :
		"a driver function";
}

/*
 * The target of wrapper i of `kind` (0 hand-out, 1 exported, 2 spare);
 * for an exported one, found on first use: the definition after ours (the
 * driver's, or another library's, which is then called unchanged: *plain
 * = 1). NULL when there is none.
 */
static void *target(unsigned i, int kind, int *plain)
{
	void *p;
	const struct gmp_cuda *c;

	*plain = 0;
	if (kind == 0)
		return LOAD(gmp_wrap_real[i]);
	if (kind == 2) {
		gmp_doubt = 1;
		return LOAD(gmp_spare_real[i]);
	}
	p = LOAD(gmp_wrap_plt[i]);
	if (!p) {
		p = gmp_lookup(RTLD_NEXT, gmp_wrap_name(i), NULL);
		dlerror();
		if (p && gmp_in_range(gmp_self(), p))
			p = NULL;
		/* Not in the global scope after ours: the caller (a library
		 * dlopened RTLD_LOCAL and linked with -lcuda, as Triton's
		 * driver module) found the driver in its own local scope,
		 * where the runtime had loaded it RTLD_LOCAL too. Its
		 * definition is the driver's own. */
		if (!p)
			p = gmp_wrap_driver_fn(gmp_wrap_name(i));
		if (!p)
			return NULL;
		STORE(gmp_wrap_plt[i], p);
	}
	c = gmp_cuda();
	*plain = !c || !gmp_in_range(&c->range, p);
	return p;
}

/*
 * The slow path of a work wrapper (gmp_go was 0): take the lease (or find
 * that none is needed), then the real function. Called from the assembly
 * below with the caller's arguments saved; returns where to jump.
 */
__attribute__((used, visibility("hidden"))) void *gmp_wrap_slow_c(unsigned i,
								 int kind);
void *gmp_wrap_slow_c(unsigned i, int kind)
{
	int saved = errno, plain, code;
	void *t = target(i, kind, &plain);

	if (!t) {
		errno = saved;
		return (void *)&fail_missing;
	}
	if (plain) {
		errno = saved;
		return t;
	}
	code = gmp_gate_work(kind == 2 ? "a driver function" :
			     gmp_wrap_name(i));
	errno = saved;
	return code ? (void *)&fail_gate : t;
}

/*
 * Before a context call: make sure the lease is held, and count the call
 * in flight, so that the give-back check (which first stops new calls by
 * clearing gmp_go, then waits for these) never decides "no context" while
 * one is being created. Returns the function to call.
 */
__attribute__((used, visibility("hidden"))) void *gmp_wrap_enter(unsigned i,
								int kind);
void *gmp_wrap_enter(unsigned i, int kind)
{
	int saved = errno, plain, code;
	void *t = target(i, kind, &plain);

	/* A call start, and in flight until gmp_wrap_leave (activity.h). */
	gmp_act_begin();
	if (!t || plain) {
		__atomic_add_fetch(&ctx_inflight, 1, __ATOMIC_SEQ_CST);
		errno = saved;
		return t ? t : (void *)&fail_missing;
	}
	for (;;) {
		__atomic_add_fetch(&ctx_inflight, 1, __ATOMIC_SEQ_CST);
		if (__atomic_load_n(&gmp_go, __ATOMIC_SEQ_CST))
			break;
		__atomic_sub_fetch(&ctx_inflight, 1, __ATOMIC_SEQ_CST);
		code = gmp_gate_work_counted(gmp_wrap_name(i), &ctx_inflight);
		if (code == GMP_GATE_COUNTED)
			break; /* granted for this call, counted in flight */
		if (code) {
			__atomic_add_fetch(&ctx_inflight, 1, __ATOMIC_SEQ_CST);
			errno = saved;
			return (void *)&fail_gate;
		}
	}
	errno = saved;
	return t;
}

/* After a context or allocation call: count what it did, wake the
 * give-back thread after a destruction. Returns rc unchanged, or
 * GMP_WRAP_AGAIN after waiting for an exiting holder's memory. */
__attribute__((used, visibility("hidden"))) int gmp_wrap_leave(unsigned i,
							      int rc, int kind);
int gmp_wrap_leave(unsigned i, int rc, int kind)
{
	int saved = errno, cls = gmp_wrap_class[i];

	(void)kind;
	/* Out of memory (CUDA_ERROR_OUT_OF_MEMORY) while a previous holder
	 * of our GPUs may still be exiting with its memory: wait for it to
	 * be gone and call again (through gmp_wrap_enter, as a new call).
	 * Not counted in flight while it waits: the give-back check, which
	 * waits for calls in flight with the gate's lock held, must not
	 * wait for a wait that needs that lock. */
	if (rc == 2 && (cls == GMP_W_ALLOC || cls == GMP_W_CTX_NEW ||
			cls == GMP_W_PCTX_NEW)) {
		int w;

		__atomic_sub_fetch(&ctx_inflight, 1, __ATOMIC_SEQ_CST);
		w = gmp_gate_oom_wait();
		/* Once more also when no exiting holder is left: the one
		 * whose memory it was may have gone between the failure and
		 * the look (then its mark was gone too). */
		if (w > 0 || (w == 0 && !oom_again)) {
			oom_again = w == 0;
			errno = saved;
			return GMP_WRAP_AGAIN;
		}
		oom_again = 0;
		errno = saved;
		return rc;
	}
	oom_again = 0;
	if (rc == 0 && cls == GMP_W_CTX_NEW)
		__atomic_add_fetch(&ctx_count, 1, __ATOMIC_SEQ_CST);
	if (rc == 0 && cls == GMP_W_CTX_DEL)
		__atomic_sub_fetch(&ctx_count, 1, __ATOMIC_SEQ_CST);
	__atomic_sub_fetch(&ctx_inflight, 1, __ATOMIC_SEQ_CST);
	gmp_act_end();
	if (rc == 0 && (cls == GMP_W_CTX_DEL || cls == GMP_W_PCTX_DEL))
		gmp_gate_context_gone();
	errno = saved;
	return rc;
}

/* ---- What lookups hand out ------------------------------------------------ */

static int name_index(const char *name)
{
	int lo = 0, hi = (int)gmp_wrap_n - 1;

	while (lo <= hi) {
		int mid = (lo + hi) / 2, c = strcmp(name, gmp_wrap_name((unsigned)mid));
		if (c == 0)
			return mid;
		if (c < 0)
			hi = mid - 1;
		else
			lo = mid + 1;
	}
	return -1;
}

void *gmp_wrap_handout(void *p, const struct gmp_cuda *c)
{
	Dl_info info;
	struct link_map *lm = NULL;
	int i = -1, saved = errno;
	unsigned k, n;

	if (!p || !c || !gmp_in_range(&c->range, p) || !gmp_wrappers())
		return p;
	/* Which exported function p is: the symbol that starts exactly at p
	 * (cuGetProcAddress may return any version of the name it was
	 * asked, or a per-thread-stream variant). */
	if (dladdr1(p, &info, (void **)&lm, RTLD_DL_LINKMAP) &&
	    info.dli_saddr == p && info.dli_sname)
		i = name_index(info.dli_sname);
	errno = saved;
	if (i >= 0) {
		void *expect = NULL;

		if (gmp_wrap_class[i] == GMP_W_QUERY)
			return p;
		if (gmp_wrap_class[i] != GMP_W_OWN &&
		    (__atomic_compare_exchange_n(&gmp_wrap_real[i], &expect, p,
						 0, __ATOMIC_ACQ_REL,
						 __ATOMIC_ACQUIRE) ||
		     expect == p))
			return gmp_wrap_h_at((unsigned)i);
	}
	/* A spare, one per distinct pointer (two threads racing may make
	 * two for one pointer, which is harmless). */
	n = LOAD(spare_used);
	for (k = 0; k < n && k < GMP_SPARES; k++)
		if (LOAD(gmp_spare_real[k]) == p)
			return gmp_spare_h_at(k);
	k = __atomic_fetch_add(&spare_used, 1, __ATOMIC_ACQ_REL);
	if (k < GMP_SPARES) {
		STORE(gmp_spare_real[k], p);
		return gmp_spare_h_at(k);
	}
	/* None left: the caller gets the real function, so the lease is
	 * taken now and kept for the life of the process. */
	gmp_doubt = 1;
	if (gmp_gate_work("a driver function"))
		return NULL;
	errno = saved;
	return p;
}

/* ---- Does the process hold a context? ---------------------------------- */

typedef CUresult (*count_fn)(int *);
typedef CUresult (*get_fn)(int *, int);
typedef CUresult (*state_fn)(int, unsigned *, int *);

void *gmp_wrap_driver_fn(const char *name)
{
	void *h = dlopen("libcuda.so.1", RTLD_NOLOAD | RTLD_LAZY), *p = NULL;

	if (h) {
		p = gmp_lookup(h, name, NULL);
		dlclose(h);
	}
	dlerror();
	return p;
}

int gmp_wrap_may_hold_context(void)
{
	count_fn count = (count_fn)gmp_wrap_driver_fn("cuDeviceGetCount");
	get_fn get = (get_fn)gmp_wrap_driver_fn("cuDeviceGet");
	state_fn state = (state_fn)gmp_wrap_driver_fn("cuDevicePrimaryCtxGetState");
	int n = 0, rc;

	/* gmp_go is 0: no context call starts; wait for those running. */
	while (__atomic_load_n(&ctx_inflight, __ATOMIC_SEQ_CST)) {
		struct timespec ms = { 0, 1000000 };
		nanosleep(&ms, NULL);
	}
	if (LOAD(gmp_doubt) || __atomic_load_n(&ctx_count, __ATOMIC_SEQ_CST))
		return 1;
	if (!count || !get || !state)
		return 1;
	rc = count(&n);
	if (rc == 3) /* CUDA_ERROR_NOT_INITIALIZED: no context can exist */
		return 0;
	if (rc)
		return 1;
	for (int d = 0; d < n; d++) {
		int dev = 0, active = 0;
		unsigned flags = 0;

		if (get(&dev, d) || state(dev, &flags, &active) || active)
			return 1;
	}
	return 0;
}

int gmp_wrap_ctx_settled(void)
{
	while (__atomic_load_n(&ctx_inflight, __ATOMIC_SEQ_CST)) {
		struct timespec ms = { 0, 1000000 };
		nanosleep(&ms, NULL);
	}
	return LOAD(gmp_doubt) ||
	       __atomic_load_n(&ctx_count, __ATOMIC_SEQ_CST) != 0;
}

/* ---- The give-back thread ------------------------------------------------- */

typedef int (*create_fn)(pthread_t *, const pthread_attr_t *,
			 void *(*)(void *), void *);

int gmp_thread_start(void *(*fn)(void *))
{
	/* pthread_create looked up at run time: before glibc 2.34 it lives
	 * in libpthread, which the library must not need at load time (a
	 * CUDA process has it loaded: the driver needs it). */
	create_fn create = (create_fn)gmp_lookup(RTLD_DEFAULT, "pthread_create",
						 NULL);
	int saved = errno, ok = 0;
	sigset_t all, old;
	pthread_t t;

	dlerror();
	if (create) {
		/* The thread takes no signal meant for the program. */
		sigfillset(&all);
		sigprocmask(SIG_SETMASK, &all, &old);
		/* Never joined and never detached: it runs until the process
		 * exits (pthread_detach would need a GLIBC_2.34 symbol or
		 * libpthread). */
		ok = create(&t, NULL, fn, NULL) == 0;
		sigprocmask(SIG_SETMASK, &old, NULL);
	}
	errno = saved;
	return ok;
}

static int gb_state;        /* 0 none, 1 starting, 2 running, 3 cannot */
static unsigned gb_seq;     /* bumped by every arm: "look again later" */
static unsigned gb_delay_ms;

static int64_t mono_ms(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

/* A futex, not a descriptor (eventfd, pipe): the library keeps no
 * descriptor of its own open besides the lease's. */
static void gb_wait(unsigned seen, int64_t ms)
{
	struct timespec t = { (time_t)(ms / 1000), (long)(ms % 1000) * 1000000 };

	syscall(SYS_futex, &gb_seq, FUTEX_WAIT_PRIVATE, seen,
		ms < 0 ? NULL : &t, NULL, 0);
}

static void *gb_main(void *arg)
{
	int64_t due = -1;
	unsigned seen = 0;

	(void)arg;
	for (;;) {
		unsigned now_seq = __atomic_load_n(&gb_seq, __ATOMIC_ACQUIRE);
		int64_t now = mono_ms();

		if (now_seq != seen) {
			seen = now_seq;
			due = now + gb_delay_ms;
			continue;
		}
		if (due >= 0 && now >= due) {
			due = -1;
			gmp_gate_give_back();
			continue;
		}
		gb_wait(seen, due < 0 ? -1 : due - now);
	}
	return NULL;
}

int gmp_wrap_giveback_arm(unsigned delay_ms)
{
	int expect = 0, st;

	if (!gmp_wrappers())
		return -1;
	if (__atomic_compare_exchange_n(&gb_state, &expect, 1, 0,
					__ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
		int ok;

		gb_delay_ms = delay_ms;
		ok = gmp_thread_start(gb_main);
		STORE(gb_state, ok ? 2 : 3);
	}
	while ((st = LOAD(gb_state)) == 1) {
		struct timespec ms = { 0, 100000 };
		nanosleep(&ms, NULL);
	}
	if (st != 2)
		return -1;
	__atomic_add_fetch(&gb_seq, 1, __ATOMIC_ACQ_REL);
	syscall(SYS_futex, &gb_seq, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
	return 0;
}

void gmp_wrap_atfork_child(void)
{
	/* The helper thread is not copied into the child: a child keeps the
	 * lease it inherited until it exits (as before give-back existed);
	 * one that takes a lease of its own starts its own thread. */
	gb_state = 0;
	ctx_inflight = 0;
}

/* ---- The wrappers' common entry points (x86-64) ---------------------------- */

#if defined(__x86_64__)
/*
 * gmp_wrap_slow_{h,plt,spare}: entered by a jump from a wrapper, with the
 * wrapper's index in r11d and the caller's arguments in place. Saves the
 * argument registers (integer, vector, and rax for variadic calls), asks
 * gmp_wrap_slow_c where to go, restores them and jumps there with the
 * stack exactly as the caller left it (stack arguments untouched).
 * gmp_wrap_call_{h,plt}: a context or allocation call, made from a frame
 * of ours between gmp_wrap_enter and gmp_wrap_leave (at most six integer
 * arguments: driver-policy.txt), and entered and made again with the
 * same arguments while gmp_wrap_leave answers GMP_WRAP_AGAIN.
 */
__asm__(
	".text\n"
	".globl gmp_wrap_slow_h\n.hidden gmp_wrap_slow_h\n"
	".globl gmp_wrap_slow_plt\n.hidden gmp_wrap_slow_plt\n"
	".globl gmp_wrap_slow_spare\n.hidden gmp_wrap_slow_spare\n"
	".globl gmp_wrap_call_h\n.hidden gmp_wrap_call_h\n"
	".globl gmp_wrap_call_plt\n.hidden gmp_wrap_call_plt\n"
	".p2align 4\n"
	"gmp_wrap_slow_h:\n"
	"	xorl %r10d, %r10d\n"
	"	jmp gmp_wrap_slow\n"
	"gmp_wrap_slow_plt:\n"
	"	movl $1, %r10d\n"
	"	jmp gmp_wrap_slow\n"
	"gmp_wrap_slow_spare:\n"
	"	movl $2, %r10d\n"
	"gmp_wrap_slow:\n"
	"	.cfi_startproc\n"
	"	pushq %rbp\n"
	"	.cfi_adjust_cfa_offset 8\n"
	"	.cfi_rel_offset %rbp, 0\n"
	"	movq %rsp, %rbp\n"
	"	.cfi_def_cfa_register %rbp\n"
	"	subq $192, %rsp\n"
	"	movq %rdi, 0(%rsp)\n"
	"	movq %rsi, 8(%rsp)\n"
	"	movq %rdx, 16(%rsp)\n"
	"	movq %rcx, 24(%rsp)\n"
	"	movq %r8, 32(%rsp)\n"
	"	movq %r9, 40(%rsp)\n"
	"	movq %rax, 48(%rsp)\n"
	"	movaps %xmm0, 64(%rsp)\n"
	"	movaps %xmm1, 80(%rsp)\n"
	"	movaps %xmm2, 96(%rsp)\n"
	"	movaps %xmm3, 112(%rsp)\n"
	"	movaps %xmm4, 128(%rsp)\n"
	"	movaps %xmm5, 144(%rsp)\n"
	"	movaps %xmm6, 160(%rsp)\n"
	"	movaps %xmm7, 176(%rsp)\n"
	"	movl %r11d, %edi\n"
	"	movl %r10d, %esi\n"
	"	call gmp_wrap_slow_c\n"
	"	movq %rax, %r11\n"
	"	movq 0(%rsp), %rdi\n"
	"	movq 8(%rsp), %rsi\n"
	"	movq 16(%rsp), %rdx\n"
	"	movq 24(%rsp), %rcx\n"
	"	movq 32(%rsp), %r8\n"
	"	movq 40(%rsp), %r9\n"
	"	movq 48(%rsp), %rax\n"
	"	movaps 64(%rsp), %xmm0\n"
	"	movaps 80(%rsp), %xmm1\n"
	"	movaps 96(%rsp), %xmm2\n"
	"	movaps 112(%rsp), %xmm3\n"
	"	movaps 128(%rsp), %xmm4\n"
	"	movaps 144(%rsp), %xmm5\n"
	"	movaps 160(%rsp), %xmm6\n"
	"	movaps 176(%rsp), %xmm7\n"
	"	leave\n"
	"	.cfi_def_cfa %rsp, 8\n"
	"	jmpq *%r11\n"
	"	.cfi_endproc\n"
	"\n"
	".p2align 4\n"
	"gmp_wrap_call_h:\n"
	"	xorl %r10d, %r10d\n"
	"	jmp gmp_wrap_call\n"
	"gmp_wrap_call_plt:\n"
	"	movl $1, %r10d\n"
	"gmp_wrap_call:\n"
	"	.cfi_startproc\n"
	"	pushq %rbp\n"
	"	.cfi_adjust_cfa_offset 8\n"
	"	.cfi_rel_offset %rbp, 0\n"
	"	movq %rsp, %rbp\n"
	"	.cfi_def_cfa_register %rbp\n"
	"	subq $80, %rsp\n"
	"	movq %rdi, -8(%rbp)\n"
	"	movq %rsi, -16(%rbp)\n"
	"	movq %rdx, -24(%rbp)\n"
	"	movq %rcx, -32(%rbp)\n"
	"	movq %r8, -40(%rbp)\n"
	"	movq %r9, -48(%rbp)\n"
	"	movq %r11, -64(%rbp)\n"
	"	movq %r10, -72(%rbp)\n"
	"1:	movl -64(%rbp), %edi\n"
	"	movl -72(%rbp), %esi\n"
	"	call gmp_wrap_enter\n"
	"	movq %rax, -56(%rbp)\n"
	"	movq -8(%rbp), %rdi\n"
	"	movq -16(%rbp), %rsi\n"
	"	movq -24(%rbp), %rdx\n"
	"	movq -32(%rbp), %rcx\n"
	"	movq -40(%rbp), %r8\n"
	"	movq -48(%rbp), %r9\n"
	"	call *-56(%rbp)\n"
	"	movl -64(%rbp), %edi\n"
	"	movl %eax, %esi\n"
	"	movl -72(%rbp), %edx\n"
	"	call gmp_wrap_leave\n"
	"	cmpl $-1, %eax\n" /* GMP_WRAP_AGAIN: enter and call again */
	"	je 1b\n"
	"	leave\n"
	"	.cfi_def_cfa %rsp, 8\n"
	"	ret\n"
	"	.cfi_endproc\n");
#endif
